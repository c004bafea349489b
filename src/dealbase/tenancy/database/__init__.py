"""The database runtime: the pool, the units of work bound to one tenant, the statements they
run, the tenant roles and the control schema's tables. The migrations stand on it; it imports
no other part of tenancy but the Scope."""
