"""The event loop's pool hands an idle connection out and takes it back without psycopg_pool's
coroutines when nothing else is under way in it, and keeps its counts as they would; any other
case (a client waiting, a connection in a transaction or past its life) goes their way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from psycopg.pq import TransactionStatus
from sqlalchemy import func, select

from dealbase.tenancy.database.connections import Database, UnitOfWork
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld


def _pid_in(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(func.pg_backend_pid())).scalar_one())


def test_units_of_work_one_after_another_leave_the_pools_counts_as_they_were(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def counts() -> tuple[set[int], tuple[int, int, int], dict[str, int], bool]:
        database = Database(database_url, pool_size=2, max_overflow=0)
        await database.open()
        try:
            await database.async_pool.wait()
            before = database.async_pool.get_stats()
            pids = {await database.run(scope, _pid_in) for _ in range(5)}
            usage = database.pool_usage()
            after = database.async_pool.get_stats()
            idle = all(
                connection._pool is None
                and connection.pgconn.transaction_status == TransactionStatus.IDLE
                for connection in database.async_pool._pool
            )
        finally:
            await database.close()
        requested = after.get("requests_num", 0) - before.get("requests_num", 0)
        return pids, usage, {"requested": requested}, idle

    pids, usage, stats, idle = asyncio.run(counts())

    assert len(pids) == 1  # the tenant's warm connection each time
    in_use, idle_count, waiting = usage
    assert (in_use, waiting) == (0, 0) and idle_count >= 1
    assert stats == {"requested": 5}
    assert idle


def test_a_connection_given_back_in_a_transaction_is_rolled_back_by_the_pool(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def statuses() -> tuple[TransactionStatus, tuple[int, int, int]]:
        database = Database(database_url, pool_size=1, max_overflow=0)
        await database.open()
        try:
            connection = await database.async_pool.getconn_for(scope.schema)
            await connection.execute("BEGIN")
            await database.async_pool.putconn(connection)
            again = await database.async_pool.getconn_for(scope.schema)
            status = TransactionStatus(again.pgconn.transaction_status)
            await database.async_pool.putconn(again)
            usage = database.pool_usage()
        finally:
            await database.close()
        return status, usage

    status, usage = asyncio.run(statuses())

    assert status == TransactionStatus.IDLE
    assert usage == (0, 1, 0)


def test_a_connection_given_back_while_another_unit_of_work_waits_goes_to_it(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second = (make_tenant().tenant.scope for _ in range(2))

    async def both() -> list[int]:
        database = Database(database_url, pool_size=1, max_overflow=0)
        await database.open()
        try:
            held, release = asyncio.Event(), asyncio.Event()

            async def holding(scope: Scope) -> int:
                async with database.unit_of_work_on_event_loop(scope):
                    held.set()
                    await release.wait()
                return 0

            async def waiting(scope: Scope) -> int:
                await held.wait()
                pending = asyncio.ensure_future(database.run(scope, _pid_in))
                await asyncio.sleep(0.05)  # queued behind the held connection
                waiters = database.pool_usage()[2]
                release.set()
                async with asyncio.timeout(5):
                    await pending
                return waiters

            results = await asyncio.gather(holding(first), waiting(second))
        finally:
            await database.close()
        return list(results)

    _, waiters = asyncio.run(both())

    assert waiters == 1
