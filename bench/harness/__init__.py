"""The machinery of bench/run.py: tools, scratch stack, seeding, load generators and reports."""
