"""The repository's own tools, run as scripts (`python tools/NAME.py`)."""
