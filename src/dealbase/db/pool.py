"""The event loop's connection pool, which prefers a connection warm for the tenant."""

from __future__ import annotations

import asyncio
import random
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from time import monotonic
from typing import Any

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout


class RetiredConnection(Exception):
    """A connection that has worked in as many tenants as allowed, refused by a pool's check."""


class ConnectionTenants:
    """The tenant schemas each pooled connection has worked in: which connection is warm for a
    tenant, and when one has seen enough of them.

    A PostgreSQL backend keeps the catalog entries of every relation it has touched until it
    ends: a connection that goes on serving requests spread over thousands of tenants would hold
    every tenant's catalog caches. A connection that has worked in ``limit`` tenants is retired:
    ``TenantAffinePool`` closes it when it is given back, and psycopg_pool's synchronous pool,
    whose ``check`` callback is ``refuse_retired``, closes it when it is next taken; either then
    opens another. With no limit, connections are only remembered.
    """

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._seen: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self._retired: weakref.WeakSet[Any] = weakref.WeakSet()
        # The synchronous pool's connections work in the CLI's and the tests' threads.
        self._lock = threading.Lock()

    def knows(self, connection: Any, schema: str) -> bool:
        seen = self._seen.get(connection)
        return seen is not None and schema in seen

    def worked_in(self, connection: Any, schema: str) -> bool:
        """Records that ``connection`` worked in ``schema``; whether that retired it."""
        with self._lock:
            seen = self._seen.setdefault(connection, set())
            seen.add(schema)
            if self._limit is None or len(seen) < self._limit:
                return False
            del self._seen[connection]
            self._retired.add(connection)
        return True

    def retired(self, connection: Any) -> bool:
        # Asked for every connection given back: most often none is retired.
        return bool(self._retired) and connection in self._retired

    def refuse_retired(self, connection: psycopg.Connection[Any]) -> None:
        """psycopg_pool's ``check`` callback: closes a retired connection and refuses it, so
        that the pool opens another (a closed connection it does not put back)."""
        if connection in self._retired:
            connection.close()
            raise RetiredConnection(f"the connection worked in {self._limit} tenants")


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A pool's connections and callers at one moment, and its counts since it was made."""

    # Connections open or being opened, in use or idle.
    size: int
    idle: int
    # Callers queued for a connection given back.
    waiting: int
    # Connections taken; of them, those that queued; callers refused (timed out or cancelled
    # while queued, or their connection failed to open).
    requests: int
    queued: int
    refused: int


# Each connection lives up to this share less than the pool's max lifetime, at random, so that
# connections opened together are not all replaced together (psycopg_pool's jitter).
_LIFETIME_JITTER = 0.05


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """What a database's pools are alike in, whichever server each connects to: the tenant
    limits (``tenants``, shared: it tracks each connection apart), the size, how long a caller
    waits, how long a connection lives, and every connection's settings (``kwargs``)."""

    tenants: ConnectionTenants
    max_size: int
    timeout: float
    max_lifetime: float
    kwargs: dict[str, Any]


class TenantAffinePool:
    """The event loop's pool of connections to PostgreSQL: gives a unit of work, of its idle
    connections, one that has already worked in the unit of work's tenant, when there is one.

    A backend's first unit of work in a tenant loads the catalog entries of the tenant's
    relations, which makes it far dearer than the same unit of work on a warm backend. A pool
    that hands out the idle connection that has waited longest, as psycopg_pool's does, keeps
    requests spread over many tenants landing on backends cold for them, and every backend ends
    up caching every tenant. Preferring a warm connection
    keeps each tenant on the few backends that served it, a busy tenant on all of them.

    ``take`` and ``give_back`` run in the event loop ``open`` ran in, and never in a thread.
    When a connection is idle, taking and giving one back are a few operations on a deque and
    a dict, with no await that suspends (psycopg_pool's coroutines and context managers cost
    more than the work they guard there).

    It opens no connection before the first caller asks: a caller that finds none idle, with
    fewer than ``max_size`` open, opens one itself (its place counted while it connects, so
    callers at once never open more than ``max_size``); a connection that fails to open raises
    psycopg's OperationalError to that caller and frees its place. When every connection is out
    and the pool is at its size, a caller waits in a queue, first come first served, and a
    connection given back goes straight to the caller that has waited longest: it runs on the
    event loop's next turn, and the one giving it back does not wait (psycopg_pool's queue
    handed it over turns later, and a worker whose callers outnumbered its connections answered
    the few that waited late: the tail of its latency). A place freed by a connection closed
    (below) goes likewise to the caller queued longest, which opens a connection in it. Waiting
    and opening together take at most ``timeout`` seconds, then PoolTimeout.

    A connection given back closed or broken, in a transaction, past its lifetime
    (``max_lifetime``, less up to 5 % at random) or retired by ``tenants`` is closed, not
    reused. ``check`` closes idle connections that no longer answer (PostgreSQL restarted).
    """

    def __init__(
        self, conninfo: str, settings: PoolSettings, *, name: str, max_idle: float = 600.0
    ) -> None:
        self.conninfo = conninfo
        self.settings = settings
        self.name = name
        self.max_idle = max_idle
        self._closed = True
        # Idle connections, the one idle longest first.
        self._idle: deque[psycopg.AsyncConnection[Any]] = deque()
        # Since when each idle connection has been idle.
        self._idle_since: dict[psycopg.AsyncConnection[Any], float] = {}
        self._shrinking: asyncio.Task[None] | None = None
        # When each connection of the pool, idle or in use, is to be replaced.
        self._expire_at: dict[psycopg.AsyncConnection[Any], float] = {}
        # Connections open or being opened, in use or idle: at most max_size.
        self._size = 0
        # Callers queued for a connection, longest first. A caller is handed a connection, or
        # None: a place freed, in which it opens one.
        self._waiters: deque[asyncio.Future[psycopg.AsyncConnection[Any] | None]] = deque()
        self._requests = 0
        self._queued = 0
        self._refused = 0

    def open(self) -> None:
        """Lets callers take connections (none is opened before the first asks), and starts
        closing, now and then, those idle past ``max_idle``."""
        self._closed = False
        self._shrinking = asyncio.get_running_loop().create_task(self._shrink_now_and_then())

    async def shrink(self, now: float | None = None) -> None:
        """Closes the connections idle for more than ``max_idle`` seconds at ``now`` (the
        monotonic clock's): a pool as busy an hour ago as it is quiet now keeps only what it
        uses, as psycopg_pool's ``max_idle`` does."""
        idle_since = self._idle_since
        oldest_kept = (monotonic() if now is None else now) - self.max_idle
        # The one idle longest is first (``_hand_over`` appends).
        while self._idle and idle_since.get(self._idle[0], oldest_kept) < oldest_kept:
            await self._discard(self._idle.popleft())

    async def _shrink_now_and_then(self) -> None:
        while True:
            await asyncio.sleep(self.max_idle / 4)
            await self.shrink()

    async def take(self, schema: str | None) -> psycopg.AsyncConnection[Any]:
        """An idle connection warm for ``schema`` (None: any), else the one idle longest, else
        a new one or the next given back; ``give_back`` returns it. PoolTimeout after the
        pool's timeout, PoolClosed once the pool is closed, psycopg's OperationalError when a
        connection fails to open."""
        self._requests += 1
        idle = self._idle
        if idle:
            if schema is not None:
                knows = self.settings.tenants.knows
                for position, connection in enumerate(idle):
                    if knows(connection, schema):
                        del idle[position]
                        return connection
            return idle.popleft()
        return await self._opened_or_handed()

    async def give_back(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """Returns a connection ``take`` gave, once: to the caller queued longest, or idle; or
        closes it (closed, broken, in a transaction, left in pipeline mode, past its lifetime,
        retired, or the pool closed)."""
        if (
            connection.pgconn.transaction_status == TransactionStatus.IDLE
            # A pipeline given up half-read (a cancelled request) may leave answers that the
            # next user would take for its own.
            and connection.pgconn.pipeline_status == PipelineStatus.OFF
            and monotonic() < self._expire_at.get(connection, 0.0)
            and not self._closed
            and not self.settings.tenants.retired(connection)
        ):
            self._hand_over(connection)
            return
        await self._discard(connection)

    async def check(self) -> None:
        """Closes the idle connections that no longer answer a statement (PostgreSQL restarted
        or ended them), and those that would be closed if given back."""
        checking = deque(self._idle)
        self._idle.clear()
        try:
            while checking:
                connection = checking[0]
                try:
                    await AsyncConnectionPool.check_connection(connection)
                except Exception:
                    await connection.close()
                checking.popleft()
                await self.give_back(connection)
        finally:
            # Cancelled: the connections not yet checked go back as they are.
            for connection in checking:
                await self.give_back(connection)

    async def close(self) -> None:
        """Closes the idle connections, refuses the callers queued (PoolClosed) and any caller
        after them; a connection in use is closed when given back."""
        self._closed = True
        if self._shrinking is not None:
            self._shrinking.cancel()
            self._shrinking = None
        # The callers first: a place freed by closing an idle connection is nobody's.
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed(f"the pool {self.name!r} is closed"))
        while self._idle:
            await self._discard(self._idle.popleft())

    def stats(self) -> PoolStats:
        return PoolStats(
            size=self._size,
            idle=len(self._idle),
            waiting=len(self._waiters),
            requests=self._requests,
            queued=self._queued,
            refused=self._refused,
        )

    async def _opened_or_handed(self) -> psycopg.AsyncConnection[Any]:
        """A new connection when the pool has room, else the next given back (or a place freed,
        then a new connection in it), within the pool's timeout."""
        if self._closed:
            raise PoolClosed(f"the pool {self.name!r} is closed")
        deadline = asyncio.timeout(self.settings.timeout)
        try:
            async with deadline:
                if self._size < self.settings.max_size:
                    self._size += 1
                    return await self._connect()
                handed = await self._handed_one()
                return handed if handed is not None else await self._connect()
        except BaseException:
            self._refused += 1
            if deadline.expired():
                raise PoolTimeout(
                    f"couldn't get a connection after {self.settings.timeout:.2f} sec"
                ) from None
            raise

    async def _handed_one(self) -> psycopg.AsyncConnection[Any] | None:
        """The next connection given back, or None: a place freed, for this caller to open a
        connection in; once the callers queued before this one have had theirs."""
        waiter: asyncio.Future[psycopg.AsyncConnection[Any] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiters.append(waiter)
        self._queued += 1
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection or a place as it gave up (timed out, or was cancelled):
                # the next caller has it.
                handed = waiter.result()
                if handed is None:
                    self._free_place()
                else:
                    await self.give_back(handed)
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection, in a place already counted in ``_size``; the place is freed if it
        fails to open (or the pool closed meanwhile)."""
        try:
            connection = await psycopg.AsyncConnection.connect(
                self.conninfo, **self.settings.kwargs
            )
        except BaseException:
            self._free_place()
            raise
        if self._closed:
            await connection.close()
            self._free_place()
            raise PoolClosed(f"the pool {self.name!r} is closed")
        lifetime = self.settings.max_lifetime * (1.0 - random.uniform(0.0, _LIFETIME_JITTER))
        self._expire_at[connection] = monotonic() + lifetime
        return connection

    def _hand_over(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """Gives ``connection`` to the caller queued longest, or makes it idle."""
        if self._handed_to_a_waiter(connection):
            return
        self._idle.append(connection)
        self._idle_since[connection] = monotonic()

    async def _discard(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._idle_since.pop(connection, None)
        if self._expire_at.pop(connection, None) is None:
            raise ValueError(f"the connection is not one of the pool {self.name!r}'s")
        await connection.close()
        self._free_place()

    def _free_place(self) -> None:
        """A connection closed or never opened: its place goes to the caller queued longest,
        who opens one in it, else the pool has one connection fewer."""
        if not self._handed_to_a_waiter(None):
            self._size -= 1

    def _handed_to_a_waiter(self, given: psycopg.AsyncConnection[Any] | None) -> bool:
        """Whether ``given`` (a connection, or None: a place to open one in) went to the caller
        queued longest that still waits; False when none does."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(given)
                return True
        return False
