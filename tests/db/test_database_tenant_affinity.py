"""The event loop's pool gives a unit of work a connection that already worked in its tenant
when one is idle, so that requests spread over many tenants find their catalog entries cached."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TypeVar

from sqlalchemy import func, select

from dealbase.db.database import Database, run_on_event_loop
from dealbase.db.units import UnitOfWork
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld, opened_database

T = TypeVar("T")


def _pid_in(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(func.pg_backend_pid())).scalar_one())


async def _pid_while_held(
    database: Database, scope: Scope, held: asyncio.Event, release: asyncio.Event
) -> int:
    async with database.unit_of_work_on_event_loop(scope) as uow:
        pid = await run_on_event_loop(_pid_in, uow)
        held.set()
        await release.wait()
        return pid


def test_each_tenant_goes_back_to_the_idle_connection_that_served_it(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second = (make_tenant().tenant.scope for _ in range(2))

    async def pids() -> tuple[dict[str, int], list[tuple[str, int]]]:
        database = Database(database_url, pool_size=2, max_overflow=0)
        await database.open()
        try:
            # Two units of work at once open the pool's two connections, one per tenant.
            release = asyncio.Event()
            held = asyncio.Event(), asyncio.Event()
            homes = await asyncio.gather(
                _pid_while_held(database, first, held[0], release),
                _settled(held[0], _pid_while_held(database, second, held[1], release)),
                _settled(held[1], _release(release)),
            )
            home = {first.schema: homes[0], second.schema: homes[1]}
            # Handed out oldest idle first, the same tenant twice in a row would alternate.
            later = []
            for scope in (first, first, second, second, first, second, second, first):
                later.append((scope.schema, await database.run(scope, _pid_in)))
        finally:
            await database.close()
        return home, later

    home, later = asyncio.run(pids())

    assert home[first.schema] != home[second.schema]
    assert all(pid == home[schema] for schema, pid in later), (home, later)


def test_a_busy_tenant_takes_an_idle_connection_cold_for_it_rather_than_wait(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    busy, other = (make_tenant().tenant.scope for _ in range(2))

    async def pids() -> tuple[int, int]:
        database = Database(database_url, pool_size=2, max_overflow=0)
        await database.open()
        try:
            release = asyncio.Event()
            held = asyncio.Event(), asyncio.Event()
            # The pool's two connections: one warm for `other`, then one warm for `busy`.
            await asyncio.gather(
                _pid_while_held(database, other, held[0], release),
                _settled(held[0], _pid_while_held(database, busy, held[1], release)),
                _settled(held[1], _release(release)),
            )
            release, held_busy = asyncio.Event(), asyncio.Event()
            holding = asyncio.create_task(_pid_while_held(database, busy, held_busy, release))
            await held_busy.wait()
            # Served while the busy tenant's connection is still held (it is let go only
            # after): had it waited for that one, the pool's acquire timeout would refuse it.
            second = await database.run(busy, _pid_in)
            release.set()
            first = await holding
        finally:
            await database.close()
        return first, second

    first, second = asyncio.run(pids())

    assert first != second


async def _settled(event: asyncio.Event, then: Awaitable[T]) -> T:
    """``then``, started once ``event`` is set."""
    await event.wait()
    return await then


async def _release(release: asyncio.Event) -> None:
    release.set()


def test_a_unit_of_work_begun_in_a_task_ends_in_the_task_that_awaited_it(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    # A GraphQL request's read transaction is opened by whichever resolver reads first (in a
    # task graphql-core made for it) and ended by the request.
    scope = make_tenant().tenant.scope

    async def begun_in_a_task_ended_here() -> int:
        async with opened_database(database_url) as database:
            stack = AsyncExitStack()

            async def begin() -> UnitOfWork:
                return await stack.enter_async_context(database.unit_of_work_on_event_loop(scope))

            uow = await asyncio.create_task(begin())
            pid = await run_on_event_loop(_pid_in, uow)
            await stack.aclose()
            # The connection went back to the pool: the next unit of work gets it.
            again = await database.run(scope, _pid_in)
            assert again == pid
            return pid

    assert asyncio.run(begun_in_a_task_ended_here()) > 0
