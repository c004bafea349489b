"""TenantAffinePool alone: which connection a caller gets, the queue of callers when every
connection is out, the pool's size, the connections it closes rather than reuse, and closing.
(tests/db/test_database_pool.py: the pool under Database's units of work.)"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import replace
from time import monotonic
from typing import Any, Literal

import psycopg
import pytest
from psycopg_pool import PoolClosed, PoolTimeout

from dealbase.db.database import libpq_url
from dealbase.db.pool import ConnectionTenants, PoolSettings, TenantAffinePool

Connection = psycopg.AsyncConnection[Any]

# A failure bound: how long a test waits for a condition (callers queued, a backend ended).
WAIT_SECONDS = 30.0


def _pool(
    database_url: str,
    *,
    max_size: int = 1,
    timeout: float = WAIT_SECONDS,
    max_lifetime: float = 1800.0,
    tenants: ConnectionTenants | None = None,
    **settings: Any,
) -> TenantAffinePool:
    pool = TenantAffinePool(
        libpq_url(database_url),
        PoolSettings(
            tenants=tenants or ConnectionTenants(None),
            max_size=max_size,
            timeout=timeout,
            max_lifetime=max_lifetime,
            kwargs={"autocommit": True, **settings},
        ),
        name="test",
    )
    pool.open()
    return pool


@asynccontextmanager
async def _opened_pool(database_url: str, **options: Any) -> AsyncIterator[TenantAffinePool]:
    """``_pool(database_url, **options)``, closed after the block."""
    pool = _pool(database_url, **options)
    try:
        yield pool
    finally:
        await pool.close()


def _on_its_own_loop(
    test: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., None]:
    """The async ``test``, run to its end on an event loop of its own (pytest takes its
    parameters from ``test``'s signature)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_SECONDS):
        while not condition():
            await asyncio.sleep(0.001)


async def _terminate(database_url: str, connection: Connection) -> None:
    """Ends ``connection``'s backend from another connection, once it has ended."""
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as other:
        ms = int(WAIT_SECONDS * 1000)
        await other.execute(
            "SELECT pg_terminate_backend(%s, %s)", (connection.info.backend_pid, ms)
        )


@_on_its_own_loop
async def test_take_prefers_an_idle_connection_warm_for_the_tenant_else_the_one_idle_longest(
    database_url: str,
) -> None:
    tenants = ConnectionTenants(None)
    async with _opened_pool(database_url, max_size=2, tenants=tenants) as pool:
        first, second = await pool.take("a"), await pool.take("b")
        tenants.worked_in(second, "b")
        await pool.give_back(first)
        await pool.give_back(second)

        assert await pool.take("b") is second
        await pool.give_back(second)  # now idle after `first`
        assert await pool.take("c") is first


@_on_its_own_loop
async def test_connections_given_back_go_to_the_queued_callers_first_come_first_served(
    database_url: str,
) -> None:
    async with _opened_pool(database_url, max_size=2) as pool:
        held = [await pool.take(None), await pool.take(None)]
        callers = []
        for _ in range(4):
            callers.append(asyncio.create_task(pool.take(None)))
            await _until(lambda: pool.stats().waiting == len(callers))  # in this order
        await pool.give_back(held[1])
        await pool.give_back(held[0])
        assert not any(caller.done() for caller in callers)  # the giver did not wait
        await asyncio.sleep(0)  # the first two queued run

        assert [caller.done() for caller in callers] == [True, True, False, False]
        assert [caller.result() for caller in callers[:2]] == [held[1], held[0]]
        assert pool.stats().waiting == 2
        await pool.give_back(held[0])
        await pool.give_back(held[1])
        assert [await caller for caller in callers[2:]] == [held[0], held[1]]
        for connection in held:
            await pool.give_back(connection)
        assert (pool.stats().size, pool.stats().idle, pool.stats().queued) == (2, 2, 4)


@_on_its_own_loop
async def test_a_caller_queued_past_the_pools_timeout_gets_pool_timeout_and_leaves_the_queue(
    database_url: str,
) -> None:
    async with _opened_pool(database_url, max_size=1) as pool:
        held = await pool.take(None)  # opened within the usual timeout: a busy machine
        pool.settings = replace(
            pool.settings, timeout=0.01
        )  # then the next caller's wait, for a connection never given back
        with pytest.raises(PoolTimeout):
            await pool.take(None)
        stats = pool.stats()
        assert (stats.size, stats.waiting, stats.refused) == (1, 0, 1)
        await pool.give_back(held)
        assert await pool.take(None) is held  # kept, not lost to the refused caller
        await pool.give_back(held)


@_on_its_own_loop
async def test_callers_at_once_never_open_more_connections_than_the_pools_size(
    database_url: str,
) -> None:
    application = f"test_pool {uuid.uuid4()}"

    pool = _pool(database_url, max_size=3, application_name=application)
    release = asyncio.Event()
    holding: list[Connection] = []
    used: set[int] = set()

    async def caller() -> None:
        connection = await pool.take(None)
        holding.append(connection)
        used.add(id(connection))
        await release.wait()
        holding.remove(connection)
        await pool.give_back(connection)

    try:
        callers = [asyncio.create_task(caller()) for _ in range(10)]
        await _until(lambda: len(holding) == 3 and pool.stats().waiting == 7)
        async with await psycopg.AsyncConnection.connect(database_url) as other:
            cursor = await other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (application,),
            )
            backends = await cursor.fetchone()
        release.set()
        async with asyncio.timeout(WAIT_SECONDS):
            await asyncio.gather(*callers)

        assert backends == (3,)
        assert len(used) == 3
        assert (pool.stats().size, pool.stats().idle) == (3, 3)
    finally:
        await pool.close()


Spoiled = Literal[
    "broken", "closed", "in a transaction", "in pipeline mode", "past its lifetime", "retired"
]


async def _spoil(
    url: str, connection: Connection, how: Spoiled, tenants: ConnectionTenants
) -> None:
    if how == "broken":
        await _terminate(url, connection)
        with pytest.raises(psycopg.OperationalError):
            await connection.execute("SELECT 1")
        assert connection.broken
    elif how == "closed":
        await connection.close()
    elif how == "in a transaction":
        await connection.execute("BEGIN")
    elif how == "in pipeline mode":
        connection.pgconn.enter_pipeline_mode()
    elif how == "retired":
        assert tenants.worked_in(connection, "a")


@pytest.mark.parametrize(
    "how",
    ["broken", "closed", "in a transaction", "in pipeline mode", "past its lifetime", "retired"],
)
@_on_its_own_loop
async def test_a_connection_given_back_broken_closed_in_a_transaction_expired_or_retired_is_closed(
    database_url: str, how: Spoiled
) -> None:
    tenants = ConnectionTenants(1)
    # A lifetime of 0: every connection is past it when given back.
    lifetime = 0.0 if how == "past its lifetime" else 1800.0
    async with _opened_pool(
        database_url, max_size=1, tenants=tenants, max_lifetime=lifetime
    ) as pool:
        connection = await pool.take(None)
        await _spoil(database_url, connection, how, tenants)
        await pool.give_back(connection)

        assert connection.closed
        assert (pool.stats().size, pool.stats().idle) == (0, 0)
        another = await pool.take(None)
        assert another is not connection
        await another.execute("SELECT 1")


@_on_its_own_loop
async def test_a_connection_that_fails_to_open_raises_to_its_caller_and_frees_its_place(
    database_url: str,
) -> None:
    pool = _pool(database_url, max_size=1)
    settings = pool.settings
    pool.settings = replace(
        settings, kwargs={**settings.kwargs, "dbname": f"no_such_database_{uuid.uuid4().hex}"}
    )
    try:
        with pytest.raises(psycopg.OperationalError) as refused:
            await pool.take(None)
        assert not isinstance(refused.value, PoolTimeout)
        assert pool.stats().size == 0
        pool.settings = settings
        connection = await pool.take(None)  # in the place the failure freed
        await pool.give_back(connection)
    finally:
        await pool.close()


@_on_its_own_loop
async def test_a_caller_queued_when_a_connection_is_closed_opens_one_in_its_place(
    database_url: str,
) -> None:
    async with _opened_pool(database_url, max_size=1) as pool:
        held = await pool.take(None)
        queued = asyncio.create_task(pool.take(None))
        await _until(lambda: pool.stats().waiting == 1)
        await held.execute("BEGIN")
        await pool.give_back(held)  # closed: its place goes to the queued caller
        async with asyncio.timeout(WAIT_SECONDS):
            opened = await queued

        assert held.closed and opened is not held
        await opened.execute("SELECT 1")
        assert (pool.stats().size, pool.stats().waiting) == (1, 0)
        await pool.give_back(opened)


@_on_its_own_loop
async def test_check_closes_the_idle_connections_that_no_longer_answer(database_url: str) -> None:
    async with _opened_pool(database_url, max_size=2) as pool:
        ended, sound = await pool.take(None), await pool.take(None)
        await pool.give_back(ended)
        await pool.give_back(sound)
        await _terminate(database_url, ended)
        await pool.check()

        assert ended.closed and not sound.closed
        assert (pool.stats().size, pool.stats().idle) == (1, 1)
        assert await pool.take(None) is sound
        await pool.give_back(sound)


@_on_its_own_loop
async def test_closing_the_pool_refuses_its_queued_callers_and_closes_connections_given_back_after(
    database_url: str,
) -> None:
    pool = _pool(database_url, max_size=1)
    held = await pool.take(None)
    queued = asyncio.create_task(pool.take(None))
    await _until(lambda: pool.stats().waiting == 1)

    await pool.close()

    with pytest.raises(PoolClosed):
        await queued
    with pytest.raises(PoolClosed):
        await pool.take(None)
    await pool.give_back(held)
    assert held.closed
    assert pool.stats().size == 0


@_on_its_own_loop
async def test_closing_the_pool_closes_its_idle_connections(database_url: str) -> None:
    pool = _pool(database_url, max_size=1)
    connection = await pool.take(None)
    await pool.give_back(connection)

    await pool.close()

    assert connection.closed
    assert (pool.stats().size, pool.stats().idle) == (0, 0)


@_on_its_own_loop
async def test_shrinking_closes_only_the_connections_idle_past_max_idle(database_url: str) -> None:
    async with _opened_pool(database_url, max_size=2) as pool:
        idle_longest, idle_since_later = await pool.take(None), await pool.take(None)
        await pool.give_back(idle_longest)
        given_back_at = monotonic()
        await pool.give_back(idle_since_later)

        await pool.shrink(now=given_back_at + pool.max_idle - 1.0)
        assert (pool.stats().size, pool.stats().idle) == (2, 2)

        # given_back_at lies between the two give-backs: only the first is idle past max_idle.
        await pool.shrink(now=given_back_at + pool.max_idle)
        assert idle_longest.closed and not idle_since_later.closed
        assert (pool.stats().size, pool.stats().idle) == (1, 1)
        assert await pool.take(None) is idle_since_later
