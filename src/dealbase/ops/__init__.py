"""Running dealbase: the CLI, the embedded PostgreSQL, logging and request context."""
