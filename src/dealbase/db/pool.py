"""The event loop's connection pool, which prefers a connection warm for the tenant."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from contextvars import ContextVar
from time import monotonic
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout
from psycopg_pool.pool_async import ReturnConnection


class ConnectionTenants:
    """The tenant schemas each pooled connection has worked in: which connection is warm for a
    tenant, and when one has seen enough of them.

    A PostgreSQL backend keeps the catalog entries of every relation it has touched until it
    ends, about 115 kB a tenant (bench/README.md, "scale.py"): a connection that goes on serving
    requests spread over thousands of tenants would hold a gigabyte. A connection that has worked
    in ``limit`` tenants is marked expired; its pool closes it when it comes back and opens
    another. With no limit, connections are only remembered.
    """

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._seen: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def knows(self, connection: Any, schema: str) -> bool:
        seen = self._seen.get(connection)
        return seen is not None and schema in seen

    def worked_in(self, connection: Any, schema: str) -> None:
        with self._lock:
            seen = self._seen.setdefault(connection, set())
            seen.add(schema)
            if self._limit is None or len(seen) < self._limit:
                return
            del self._seen[connection]
        # psycopg_pool replaces a connection past this moment when it is returned (its
        # ``max_lifetime`` check, which has no public hook for one connection).
        connection._expire_at = 0.0


# The tenant schema the running task is taking a connection for, read by TenantAffinePool.
_TENANT_WANTED: ContextVar[str | None] = ContextVar("dealbase_tenant_wanted", default=None)


class TenantAffinePool(AsyncConnectionPool):
    """A pool that gives a unit of work, of its idle connections, one that has already worked
    in the unit of work's tenant, when there is one.

    A backend's first unit of work in a tenant loads the catalog entries of the tenant's
    relations (a `POST /customers` takes several times as long as on a warm backend,
    bench/README.md, "scale.py"). psycopg_pool hands out the idle connection that has waited
    longest, so requests spread over many tenants keep landing on backends cold for them, and
    every backend ends up caching every tenant. Preferring a warm connection keeps each tenant
    on the few backends that served it, a busy tenant on all of them.

    psycopg_pool has no public hook for that choice: this overrides ``_get_ready_connection``,
    which runs under the pool's lock when a caller asks for a connection (psycopg-pool 3.3,
    pinned in pyproject.toml; tests/db/test_database_tenant_affinity.py fails if it is no
    longer called).

    When a connection is idle and nothing else is under way in the pool (its lock free, nobody
    waiting, no check or reset callback), ``getconn_for`` takes it and ``putconn`` gives it back
    without ``getconn``'s and ``putconn``'s coroutines, as they would do it: 10,000 instructions
    a unit of work against 48,700 (bench/README.md).

    When every connection is out and the pool is at its size, a caller of ``getconn_for`` waits
    in a queue of its own, first come first served, and a connection given back goes straight
    to the caller that has waited longest: it runs on the event loop's next turn. Through
    psycopg_pool's queue it ran three turns later, and the one giving the connection back
    waited too: a worker whose callers outnumbered its connections answered the few that
    waited 15 to 30 ms late while the others took 3 (bench/README.md). Any other case goes
    ``getconn``'s and ``putconn``'s way.
    """

    def __init__(self, *args: Any, tenants: ConnectionTenants, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tenants = tenants
        # Callers waiting for a connection given back, longest first (``_handed_one``).
        self._handoffs: deque[asyncio.Future[psycopg.AsyncConnection[Any]]] = deque()

    async def getconn_for(self, schema: str | None) -> psycopg.AsyncConnection[Any]:
        """``getconn()``, preferring an idle connection warm for ``schema`` (None: any, the one
        idle longest); ``putconn`` gives it back."""
        if not (self._closed or self._waiting or self._check or self._lock.locked()):
            if self._pool:
                connection = self._take_ready(schema)
                self._stats[self._REQUESTS_NUM] += 1
                # What getconn marks a connection out of the pool by.
                connection._pool = self
                return connection
            if self._nconns >= self._max_size:
                return await self._handed_one()
        wanted = _TENANT_WANTED.set(schema)
        try:
            return await self.getconn()
        finally:
            _TENANT_WANTED.reset(wanted)

    async def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if (
            conn._pool is self
            and conn.pgconn.transaction_status == TransactionStatus.IDLE
            and not (self._closed or self._waiting or self._reset or self._lock.locked())
            and self._drained_at < conn._created_at
            and monotonic() < conn._expire_at
        ):
            if self._handed_over(conn):
                return
            conn._pool = None
            self._pool.append(conn)
            if self._pool_full_event and len(self._pool) >= self._min_size:
                self._pool_full_event.set()  # as ``_add_to_pool`` tells an ``open(wait=True)``
            return
        await super().putconn(conn)

    async def _handed_one(self) -> psycopg.AsyncConnection[Any]:
        """The next connection given back (or added), once the callers queued before this one
        have had theirs; PoolTimeout after the pool's timeout, as ``getconn``."""
        waiter: asyncio.Future[psycopg.AsyncConnection[Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._handoffs.append(waiter)
        self._stats[self._REQUESTS_NUM] += 1
        self._stats[self._REQUESTS_QUEUED] += 1
        queued_at = monotonic()
        try:
            async with asyncio.timeout(self.timeout):
                connection = await waiter
        except BaseException as failed:
            self._stats[self._REQUESTS_ERRORS] += 1
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection as the caller gave up (timed out, or was cancelled).
                self.run_task(ReturnConnection(self, waiter.result(), from_getconn=True))
            waiter.cancel()
            if isinstance(failed, TimeoutError):
                raise PoolTimeout(
                    f"couldn't get a connection after {self.timeout:.2f} sec"
                ) from None
            raise
        finally:
            self._stats[self._REQUESTS_WAIT_MS] += int(1000.0 * (monotonic() - queued_at))
        connection._pool = self
        return connection

    def _handed_over(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Gives ``conn`` to the caller queued longest, if one still waits."""
        while self._handoffs:
            waiter = self._handoffs.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    async def _add_to_pool(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # Where a connection psycopg_pool took back (reset, replaced or newly opened) becomes
        # idle: a caller in psycopg_pool's queue has it first, then one in ours.
        if self._closed or self._waiting or not self._handed_over(conn):
            await super()._add_to_pool(conn)

    async def close(self, timeout: float = 5.0) -> None:
        await super().close(timeout)
        while self._handoffs:
            waiter = self._handoffs.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed(f"the pool {self.name!r} is closed"))

    def _get_measures(self) -> dict[str, int]:
        measures = super()._get_measures()
        measures[self._REQUESTS_WAITING] += sum(not each.done() for each in self._handoffs)
        return measures

    def _take_ready(self, schema: str | None) -> psycopg.AsyncConnection[Any]:
        """The idle connection warm for ``schema`` if there is one, else the one idle longest
        (``_pool`` is not empty)."""
        taken = None
        if schema is not None:
            for position, connection in enumerate(self._pool):
                if self._tenants.knows(connection, schema):
                    taken = connection
                    del self._pool[position]
                    break
        if taken is None:
            taken = self._pool.popleft()
        self._nconns_min = min(self._nconns_min, len(self._pool))
        return taken

    async def _get_ready_connection(
        self, timeout: float | None
    ) -> psycopg.AsyncConnection[Any] | None:
        schema = _TENANT_WANTED.get()
        if schema is not None and (timeout is None or timeout > 0.0) and self._pool:
            return self._take_ready(schema)
        return await super()._get_ready_connection(timeout)
