"""The database each request opens its one unit of work on (``Database.run``)."""

from __future__ import annotations

from starlette.requests import Request

from dealbase.tenancy.database import Database


def database_of(request: Request) -> Database:
    """A plain function, not a FastAPI dependency: resolving one costs more than this does."""
    db: Database = request.app.state.database
    return db
