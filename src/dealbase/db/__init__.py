"""The database runtime: the pool, the units of work bound to one tenant, the statements they
run, the driver's faults in the project's terms, and the one LISTEN connection of a process.
It stands on the Scope alone of the rest of the project; psycopg is its business."""
