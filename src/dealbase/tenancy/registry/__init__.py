"""The tenant registry and a tenant's life: creating it (its schema migrated, or a spare one
taken), suspending, resuming and deleting it, and placing it on a Citus cluster. It runs the
migrations; nothing below it imports it."""
