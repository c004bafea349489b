"""The event loop's pool, through Database: an idle connection is handed out and taken back
with the pool's counts kept; a connection given back in a transaction is not reused. When every
connection is out, callers queue first come first served, and a connection given back goes to
the one queued longest on the loop's next turn. (tests/db/test_pool.py: the pool alone.)"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolClosed
from sqlalchemy import func, select

from dealbase.db.database import Database, DatabaseLimits
from dealbase.db.pool import PoolStats, TenantAffinePool
from dealbase.db.units import UnitOfWork
from dealbase.errors import DatabaseUnavailable
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld, opened_database


def _pid_in(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(func.pg_backend_pid())).scalar_one())


# A failure bound: how long a test waits for callers to queue, or for one to be served.
WAIT_SECONDS = 30.0


def _waiting(pool: TenantAffinePool) -> int:
    """How many callers wait for a connection of ``pool``, as its statistics count them."""
    return pool.stats().waiting


async def _until_waiting(pool: TenantAffinePool, count: int) -> None:
    """Returns once ``count`` callers wait for a connection of ``pool``: a caller has queued
    when this returns, however long the machine took to run it."""
    async with asyncio.timeout(WAIT_SECONDS):
        while _waiting(pool) < count:
            await asyncio.sleep(0.001)


def test_units_of_work_one_after_another_leave_the_pools_counts_as_they_were(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def counts() -> tuple[set[int], tuple[int, int, int], PoolStats]:
        database = Database(database_url, pool_size=2, max_overflow=0)
        await database.open()
        try:
            pids = {await database.run(scope, _pid_in) for _ in range(5)}
            usage = database.pool_usage()
            stats = database.async_pool.stats()
        finally:
            await database.close()
        return pids, usage, stats

    pids, usage, stats = asyncio.run(counts())

    assert len(pids) == 1  # the tenant's warm connection each time
    assert usage == (0, 1, 0)  # one after another: one connection opened
    assert (stats.requests, stats.queued, stats.refused) == (5, 0, 0)


def test_a_connection_given_back_in_a_transaction_is_closed_and_the_next_caller_gets_another(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def statuses() -> tuple[bool, TransactionStatus, bool, tuple[int, int, int]]:
        async with opened_database(database_url) as database:
            connection = await database.async_pool.take(scope.schema)
            await connection.execute("BEGIN")
            await database.async_pool.give_back(connection)
            again = await database.async_pool.take(scope.schema)
            status = TransactionStatus(again.pgconn.transaction_status)
            await database.async_pool.give_back(again)
            usage = database.pool_usage()
        return connection.closed, status, again is connection, usage

    closed, status, same, usage = asyncio.run(statuses())

    assert closed and not same
    assert status == TransactionStatus.IDLE
    assert usage == (0, 1, 0)


def test_a_connection_given_back_while_another_unit_of_work_waits_goes_to_it(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second = (make_tenant().tenant.scope for _ in range(2))

    async def both() -> list[int]:
        async with opened_database(database_url) as database:
            held, release = asyncio.Event(), asyncio.Event()

            async def holding(scope: Scope) -> int:
                async with database.unit_of_work_on_event_loop(scope):
                    held.set()
                    await release.wait()
                return 0

            async def waiting(scope: Scope) -> int:
                await held.wait()
                pending = asyncio.ensure_future(database.run(scope, _pid_in))
                await _until_waiting(database.async_pool, 1)  # queued behind the held one
                waiters = database.pool_usage()[2]
                release.set()
                async with asyncio.timeout(WAIT_SECONDS):
                    await pending
                return waiters

            results = await asyncio.gather(holding(first), waiting(second))
        return list(results)

    _, waiters = asyncio.run(both())

    assert waiters == 1


def test_callers_queued_for_a_pool_at_its_size_get_connections_in_the_order_they_came(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def served() -> tuple[list[int], tuple[int, int, int]]:
        database = Database(database_url, pool_size=2, max_overflow=0)
        await database.open()
        pool = database.async_pool
        try:
            held = [await pool.take(scope.schema) for _ in range(2)]
            order: list[int] = []

            async def caller(number: int) -> None:
                connection = await pool.take(scope.schema)
                order.append(number)
                await asyncio.sleep(0)  # each holds it a turn: the rest stay queued
                await pool.give_back(connection)

            callers = []
            for number in range(6):
                callers.append(asyncio.create_task(caller(number)))
                await _until_waiting(pool, number + 1)  # queued in this order
            for connection in held:
                await pool.give_back(connection)
            async with asyncio.timeout(WAIT_SECONDS):
                await asyncio.gather(*callers)
            usage = database.pool_usage()
        finally:
            await database.close()
        return order, usage

    order, usage = asyncio.run(served())

    assert order == [0, 1, 2, 3, 4, 5]
    assert usage == (0, 2, 0)


def test_a_connection_given_back_reaches_the_caller_queued_for_it_on_the_loops_next_turn(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    # Through psycopg_pool's own queue the caller ran three turns later, and each turn of a
    # busy worker's loop answers every request in flight a step (bench/README.md).
    scope = make_tenant().tenant.scope

    async def turns() -> tuple[bool, bool, int]:
        async with opened_database(database_url) as database:
            pool = database.async_pool
            held, queued = await _one_held_one_queued(pool, scope.schema)
            await pool.give_back(held)
            served_at_once = queued.done()
            await asyncio.sleep(0)
            served_next_turn = queued.done()
            connection = await queued
            pid = connection.info.backend_pid
            await pool.give_back(connection)
        return served_at_once, served_next_turn, pid

    served_at_once, served_next_turn, pid = asyncio.run(turns())

    assert (served_at_once, served_next_turn) == (False, True)
    assert pid > 0


def test_a_caller_queued_past_the_pools_timeout_is_refused_and_no_connection_is_lost(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def refused() -> tuple[float, bool, int, tuple[int, int, int]]:
        database = Database(
            database_url,
            pool_size=1,
            max_overflow=0,
            limits=DatabaseLimits(acquire_timeout_seconds=0.2),
        )
        await database.open()
        try:
            held = await database.async_pool.take(scope.schema)
            started = time.monotonic()
            # A timer set after the caller queued, for five times the pool's timeout, on the
            # same loop: the loop fires due timers in the order they are due, so the caller is
            # refused before it fires if the pool's timeout refused it, however long the busy
            # machine held the loop up, and after it if anything slower did.
            later = asyncio.ensure_future(asyncio.sleep(1.0))
            with pytest.raises(DatabaseUnavailable):
                await database.run(scope, _pid_in)
            waited = time.monotonic() - started
            refused_first = not later.done()
            later.cancel()
            await database.async_pool.give_back(held)
            pid = await database.run(scope, _pid_in)
            usage = database.pool_usage()
        finally:
            await database.close()
        return waited, refused_first, pid, usage

    waited, refused_first, pid, usage = asyncio.run(refused())

    assert waited >= 0.2  # not before its timeout
    assert refused_first  # by its timeout, not later
    assert pid > 0
    assert usage == (0, 1, 0)


def test_a_caller_cancelled_as_it_is_handed_a_connection_gives_the_connection_back(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def given_back() -> tuple[bool, int, tuple[int, int, int]]:
        async with opened_database(database_url) as database:
            pool = database.async_pool
            held, queued = await _one_held_one_queued(pool, scope.schema)
            await pool.give_back(held)  # handed to the queued caller, which has not run yet
            queued.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await queued
            async with asyncio.timeout(WAIT_SECONDS):
                pid = await database.run(scope, _pid_in)
            usage = database.pool_usage()
        return queued.cancelled(), pid, usage

    cancelled, pid, usage = asyncio.run(given_back())

    assert cancelled
    assert pid > 0
    assert usage == (0, 1, 0)


def test_callers_queued_when_the_pool_closes_are_told_it_closed(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def told() -> BaseException | None:
        database = Database(database_url, pool_size=1, max_overflow=0)
        await database.open()
        held, queued = await _one_held_one_queued(database.async_pool, scope.schema)
        await database.close()
        async with asyncio.timeout(WAIT_SECONDS):
            outcome = (await asyncio.gather(queued, return_exceptions=True))[0]
        await held.close()
        return outcome if isinstance(outcome, BaseException) else None

    assert isinstance(asyncio.run(told()), PoolClosed)


async def _one_held_one_queued(
    pool: TenantAffinePool, schema: str
) -> tuple[psycopg.AsyncConnection[Any], asyncio.Task[psycopg.AsyncConnection[Any]]]:
    """The pool's only connection taken, and a caller queued for it."""
    held = await pool.take(schema)
    queued = asyncio.create_task(pool.take(schema))
    await _until_waiting(pool, 1)
    return held, queued
