"""Runs the control tree on the connection (and inside the transaction) the runner hands in."""

from alembic import context

from dealbase.tenancy.control_tables import CONTROL_SCHEMA

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table_schema=CONTROL_SCHEMA)
with context.begin_transaction():
    context.run_migrations()
