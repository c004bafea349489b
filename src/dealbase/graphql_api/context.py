"""The per-request context: who is calling, the database, and fresh DataLoaders."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request
from strawberry.fastapi import BaseContext

from dealbase.db.database import Database, run_on_event_loop
from dealbase.db.faults import DriverError
from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.edge.callers import charge_batch, dashboard_scope
from dealbase.edge.database import webhook_addresses_of
from dealbase.errors import Unauthenticated
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.validation import department_of
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.tenancy.callers.api_keys import AUTHENTICATION_FAILED
from dealbase.tenancy.scope import Scope

T = TypeVar("T")


@dataclass
class GraphQLContext(BaseContext):
    request_id: str
    # None only for the GraphiQL page, which a browser opens without credentials and which
    # runs no resolver.
    caller: Scope | None
    database: Database
    # Where webhooks may be sent (DEALBASE_WEBHOOKS_ALLOW_PRIVATE).
    webhook_addresses: AddressPolicy = field(default_factory=AddressPolicy)
    # Loaders are made on first use and live for this request only (a subscription's result),
    # so nothing is cached across requests (or callers); so do the records fitted to the
    # caller's tenant's custom fields (``custom_fields``).
    loaders: dict[tuple[str, int], Any] = field(default_factory=dict)
    # The request's one read transaction, opened by its first read and ended with the request
    # (or by a write): a dashboard's page, count and loaders share its BEGIN and COMMIT.
    _reads: AsyncExitStack = field(default_factory=AsyncExitStack)
    _reading: UnitOfWork | None = None
    # One statement at a time on that connection: resolvers and loaders run concurrently.
    _turn: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        super().__init__()

    @property
    def scope(self) -> Scope:
        if self.caller is None:
            raise Unauthenticated(AUTHENTICATION_FAILED)
        return self.caller

    async def run(self, work: Callable[[UnitOfWork], T], scope: Scope | None = None) -> T:
        """Reads ``work`` in the request's read transaction."""
        narrowed = scope or self.scope
        async with self._turn:
            if self._reading is None:
                self._reading = await self._reads.enter_async_context(
                    self.database.unit_of_work_on_event_loop(self.scope, reading=True)
                )
            try:
                return await run_on_event_loop(work, self._reading.narrowed_to(narrowed))
            except (DriverError, asyncio.CancelledError) as failed:
                # The statement failed the transaction (a lock or statement timeout), or psycopg
                # cancelled it on the server because the field was cancelled (graphql-core
                # cancels a query's other root fields when a non-null one fails): it ends as a
                # unit of work's does, told why (a timeout is a retryable ``database_timeout``),
                # and the fields after this one read in a new one.
                reads, self._reads, self._reading = self._reads, AsyncExitStack(), None
                await reads.__aexit__(type(failed), failed, failed.__traceback__)
                raise

    async def write(
        self, work: Callable[[UnitOfWork], T | AfterCommit[T]], scope: Scope | None = None
    ) -> T:
        """``work`` in a transaction of its own, committed before it returns: each mutation of
        a document stands or fails alone, as GraphQL runs them one after another."""
        # The read transaction ends first, so a request never holds two pooled connections.
        await self.close()
        async with self._turn:
            return await self.database.run(scope or self.scope, work)

    async def close(self) -> None:
        """Ends the read transaction, if one was opened, and returns its connection."""
        async with self._turn:
            self._reading = None
            await self._reads.aclose()

    async def scope_in(self, department_id: uuid.UUID | None) -> Scope:
        """The caller's Scope narrowed to one department, when ``departmentId`` is given.

        A department key may only name its own department; a tenant-wide key any department of
        its tenant. Either way an unknown or foreign department answers like an unknown id.
        """
        if department_id is None:
            return self.scope
        await self.run(lambda uow: pipeline.get_department(uow, department_id))
        return self.scope.in_department(department_id)

    async def department_scope(self, department_id: uuid.UUID | None) -> Scope:
        """``scope_in``, for writes that need a department (upserts and batches): a tenant-wide
        key that names none is refused before anything else is judged."""
        scope = await self.scope_in(department_id)
        department_of(scope)
        return scope

    async def charge_batch(self, scope: Scope, operations: int) -> None:
        """Charges a batch of ``operations`` to the rate limits as REST charges its batches:
        ceil(operations / 100) requests, of which the request's admission spent the first."""
        assert isinstance(self.request, Request), "a caller's context has its request"
        await charge_batch(self.request, scope, operations)


async def context_for(request: Request) -> AsyncIterator[GraphQLContext]:
    """Authenticates like REST, but also admits tenant-wide dashboard keys (no department).

    A dependency with ``yield``: the request's read transaction ends when the request does,
    whether the operation succeeded, failed or was cancelled.
    """
    database: Database = request.app.state.database
    if _asks_for_the_ide(request):
        yield GraphQLContext(request_id="", caller=None, database=database)
        return
    context = GraphQLContext(
        request_id=getattr(request.state, "request_id", ""),
        caller=await dashboard_scope(request),
        database=database,
        webhook_addresses=webhook_addresses_of(request),
    )
    try:
        yield context
    finally:
        await context.close()


def _asks_for_the_ide(request: Request) -> bool:
    """A browser opening GET /graphql: Strawberry answers with the GraphiQL page (when it is on)."""
    return (
        request.method == "GET"
        and "text/html" in request.headers.get("accept", "")
        and "query" not in request.query_params
    )
