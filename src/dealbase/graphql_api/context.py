"""The per-request context: who is calling, the database, and fresh DataLoaders."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from anyio import to_thread
from fastapi import Request
from strawberry.fastapi import BaseContext

from dealbase.edge.callers import dashboard_scope
from dealbase.errors import Unauthenticated
from dealbase.platform.pipeline import service as pipeline
from dealbase.tenancy.api_keys import AUTHENTICATION_FAILED
from dealbase.tenancy.database import Database, UnitOfWork
from dealbase.tenancy.scope import Scope

T = TypeVar("T")


@dataclass
class GraphQLContext(BaseContext):
    request_id: str
    # None only for the GraphiQL page, which a browser opens without credentials and which
    # runs no resolver.
    caller: Scope | None
    database: Database
    # Loaders are made on first use and live for this request only, so nothing is cached
    # across requests (or callers).
    loaders: dict[tuple[str, int], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()

    @property
    def scope(self) -> Scope:
        if self.caller is None:
            raise Unauthenticated(AUTHENTICATION_FAILED)
        return self.caller

    async def run(self, work: Callable[[UnitOfWork], T], scope: Scope | None = None) -> T:
        """``work`` in a unit of work of its own, off the event loop (the SQL is synchronous)."""

        def in_transaction() -> T:
            with self.database.unit_of_work(scope or self.scope) as uow:
                return work(uow)

        return await to_thread.run_sync(in_transaction)

    async def scope_in(self, department_id: uuid.UUID | None) -> Scope:
        """The caller's Scope narrowed to one department, when ``departmentId`` is given.

        A department key may only name its own department; a tenant-wide key any department of
        its tenant. Either way an unknown or foreign department answers like an unknown id.
        """
        if department_id is None:
            return self.scope
        await self.run(lambda uow: pipeline.get_department(uow, department_id))
        return self.scope.in_department(department_id)


async def context_for(request: Request) -> GraphQLContext:
    """Authenticates like REST, but also admits tenant-wide dashboard keys (no department)."""
    database: Database = request.app.state.database
    if _asks_for_the_ide(request):
        return GraphQLContext(request_id="", caller=None, database=database)
    return GraphQLContext(
        request_id=getattr(request.state, "request_id", ""),
        caller=await dashboard_scope(request),
        database=database,
    )


def _asks_for_the_ide(request: Request) -> bool:
    """A browser opening GET /graphql: Strawberry answers with the GraphiQL page (when it is on)."""
    return (
        request.method == "GET"
        and "text/html" in request.headers.get("accept", "")
        and "query" not in request.query_params
    )
