"""Runs the tenant tree in one tenant schema.

Tenant migrations name no schema: the runner has set the transaction's search_path to the tenant's
schema, and the version table lives there too, so every tenant records its own revision.
"""

from alembic import context

connection = context.config.attributes["connection"]
schema = context.config.attributes["schema"]
context.configure(connection=connection, version_table_schema=schema)
with context.begin_transaction():
    context.run_migrations()
