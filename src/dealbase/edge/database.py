"""What the app holds for every request: the database each request opens its one unit of work
on (``Database.run``), and the webhook address policy."""

from __future__ import annotations

from starlette.requests import Request

from dealbase.db.database import Database
from dealbase.platform.webhooks.addresses import AddressPolicy


def database_of(request: Request) -> Database:
    """A plain function, not a FastAPI dependency: resolving one costs more than this does."""
    db: Database = request.app.state.database
    return db


def webhook_addresses_of(request: Request) -> AddressPolicy:
    """Where this service may send webhooks (the setting DEALBASE_WEBHOOKS_ALLOW_PRIVATE)."""
    policy: AddressPolicy = request.app.state.webhook_addresses
    return policy
