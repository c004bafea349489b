"""A tenant's own typed fields on its customers, deals and activities: their definitions, and
the columns of its schema that hold their values."""
