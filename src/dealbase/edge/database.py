"""The database each request opens its one unit of work on (``Database.unit_of_work``)."""

from __future__ import annotations

from fastapi import Request

from dealbase.tenancy.database import Database


async def database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db
