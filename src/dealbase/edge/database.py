"""What the app holds for every request: the database each request opens its one unit of work
on (``Database.run``), the schema changes custom fields make, and the webhook address policy."""

from __future__ import annotations

from starlette.requests import Request

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges
from dealbase.platform.webhooks.addresses import AddressPolicy


def database_of(request: Request) -> Database:
    """A plain function, not a FastAPI dependency: resolving one costs more than this does."""
    db: Database = request.app.state.database
    return db


def webhook_addresses_of(request: Request) -> AddressPolicy:
    """Where this service may send webhooks (the setting DEALBASE_WEBHOOKS_ALLOW_PRIVATE)."""
    policy: AddressPolicy = request.app.state.webhook_addresses
    return policy


def schema_changes_of(request: Request) -> SchemaChanges:
    """Where a custom field's column and indexes are made (``db.schema_changes``)."""
    changes: SchemaChanges = request.app.state.schema_changes
    return changes
