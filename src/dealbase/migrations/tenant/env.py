"""Renders the tenant tree as SQL (``upgrade --sql``) for the runner to replay in each schema.

The rendered script names no schema (the runner sets the transaction's search_path to the
tenant's schema, where the version table lives too, so every tenant records its own revision)
and opens no transaction: the runner executes it inside the tenant's own.
"""

from alembic import context

if not context.is_offline_mode():
    raise RuntimeError("the tenant tree runs only rendered: dealbase.migrations.runner")
context.configure(dialect_name="postgresql", transactional_ddl=False, literal_binds=True)
with context.begin_transaction():
    context.run_migrations()
