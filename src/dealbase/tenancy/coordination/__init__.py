"""What the workers of every process share through the control schema: which tenants have
deliveries to make, and periodic tasks that one worker of all runs."""
