"""The connection pool and the units of work that bind a transaction to one tenant."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from time import monotonic
from typing import Any, Generic, Protocol, TypeVar, cast

import psycopg
import sqlalchemy.exc
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout
from psycopg_pool.pool_async import ReturnConnection
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import make_url

from dealbase.errors import DatabaseTimeout, DatabaseUnavailable
from dealbase.tenancy.database.greenlets import run_in_greenlet
from dealbase.tenancy.database.roles import switch_to, tenant_role
from dealbase.tenancy.database.statements import (
    ServerPrepared,
    StatementCache,
    StatementListener,
    TenantConnection,
)
from dealbase.tenancy.scope import Scope

T = TypeVar("T")

# A statement is prepared on a connection once it has run this many times there (psycopg's
# default): by psycopg on the engine's connections, by ``ServerPrepared`` in units of work.
PREPARE_AFTER = 5


def application_name(pid: int) -> str:
    return f"dealbase pid={pid}"


def libpq_url(database_url: str) -> str:
    """The URL as libpq (psycopg.connect) takes it: without SQLAlchemy's ``+driver`` part."""
    url = make_url(database_url)
    return url.set(drivername=url.drivername.split("+")[0]).render_as_string(hide_password=False)


def sqlalchemy_url(database_url: str) -> str:
    """The same URL, with the psycopg 3 driver named so SQLAlchemy does not pick psycopg2."""
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


# Seconds a client is told to wait (Retry-After) before retrying what the database could not do.
RETRY_AFTER_SECONDS = 2


@dataclass(frozen=True, slots=True)
class DatabaseLimits:
    """How long any one piece of database work may take, so that a slow query or a database
    that is down holds neither a pooled connection nor a request for long.

    Both timeouts travel in the connection's startup packet (libpq ``options``): they apply to
    every statement of every transaction, at no round trip. 0 turns one off.
    """

    statement_timeout_ms: int = 15_000
    lock_timeout_ms: int = 3_000
    # Waiting for a pooled connection, and for PostgreSQL to accept a new one.
    acquire_timeout_seconds: float = 3.0

    def connection_options(self) -> str:
        return (
            f"-c statement_timeout={self.statement_timeout_ms}"
            f" -c lock_timeout={self.lock_timeout_ms}"
        )


def _timed_out(error: BaseException | None) -> bool:
    return isinstance(error, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable)


# The faults a retry may outlive, by SQLSTATE: the connection (class 08, also a Citus worker out
# of reach), resources (53: too many connections, memory, disk), the server stopping or starting
# (57P01 to 57P05), a deadlock or a serialization failure (40P01, 40001). Any other error the
# server answers is permanent: the same request meets it again (psycopg files several of those
# under OperationalError too, such as 55P02 or a Citus worker's 55000).
_TRANSIENT_CLASSES = ("08", "53")
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "40001", "40P01"})


# Citus reports a worker that refuses its connection's role as a connection failure (08006), as
# it reports a worker out of reach; only the worker's words, which Citus quotes, tell a login
# refused for good from a node that is down ("Connection refused").
_LOGIN_REFUSED = re.compile(
    r"failed with the following error: FATAL:\s+(role \".*\" is not permitted to log in"
    r"|password authentication failed|no pg_hba\.conf entry"
    r"|role \".*\" does not exist|database \".*\" does not exist)"
)


def is_transient(error: BaseException | None) -> bool:
    """Whether ``error`` (psycopg's, or the pool's) is a fault a retry may outlive, not an
    error of the request or of the database's state."""
    if isinstance(error, PoolTimeout):
        return True
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate
    if state is None:
        # The client's own: no connection, or it broke before the server answered.
        return isinstance(error, psycopg.OperationalError)
    if state.startswith("08") and _LOGIN_REFUSED.search(str(error)):
        return False
    return state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_STATES


@contextmanager
def database_faults() -> Iterator[None]:
    """The driver's faults as the errors a client is told of: a timeout or a transient fault
    (``is_transient``) is a 503 to retry (``Retry-After``); any other database error goes on
    as it is, an internal error with the database's message in the log."""
    try:
        yield
    except (
        psycopg.Error,
        PoolTimeout,
        sqlalchemy.exc.DBAPIError,
        sqlalchemy.exc.TimeoutError,
    ) as exc:
        cause = exc.orig if isinstance(exc, sqlalchemy.exc.DBAPIError) else exc
        if _timed_out(cause):
            raise DatabaseTimeout(
                "The database did not finish in time; try again.",
                retry_after_seconds=RETRY_AFTER_SECONDS,
            ) from exc
        if is_transient(cause) or isinstance(exc, sqlalchemy.exc.TimeoutError):
            raise DatabaseUnavailable(
                "The database is unavailable; try again.", retry_after_seconds=RETRY_AFTER_SECONDS
            ) from exc
        raise


class Finisher(Protocol):
    """Work a unit of work does last (the events outbox): statements given to ``defer`` for its
    COMMIT's round trip, then what follows the COMMIT."""

    def __init__(self) -> None: ...

    def before_commit(self, connection: TenantConnection) -> None: ...

    def after_commit(self, connection: TenantConnection) -> None: ...


F = TypeVar("F", bound=Finisher)


@dataclass(frozen=True, slots=True)
class UnitOfWork:
    """One transaction in one tenant's schema, opened and committed at the edge, not in services."""

    connection: TenantConnection
    scope: Scope
    # One of each kind, run after the work returned and before COMMIT, in the order they were
    # first asked for. Shared with the narrowed units of work of the same transaction.
    finishers: dict[type[Finisher], Finisher] = field(default_factory=dict)

    def finisher(self, kind: type[F]) -> F:
        """The transaction's finisher of that kind, made on first use."""
        found = self.finishers.get(kind)
        if found is None:
            found = self.finishers[kind] = kind()
        return cast(F, found)

    def finish(self) -> None:
        """Commits, with what the finishers defer to the COMMIT, then runs what they do after
        it; the unit of work calls it once its work has returned (a second call does nothing)."""
        if self.connection.committed:
            return
        for finisher in self.finishers.values():
            finisher.before_commit(self.connection)
        self.connection.commit()
        for finisher in self.finishers.values():
            finisher.after_commit(self.connection)

    def narrowed_to(self, scope: Scope) -> UnitOfWork:
        """The same transaction for a narrower Scope of the same tenant (one department)."""
        if scope.schema != self.scope.schema:
            raise ValueError("a unit of work never changes tenant")
        return replace(self, scope=scope)


async def run_on_event_loop(work: Callable[..., T], *arguments: Any) -> T:
    """``work(*arguments)``, synchronous platform code, run so that the awaits of an
    asynchronous unit of work go to the event loop: no thread hop, a greenlet switch per round
    trip instead (``greenlets``)."""
    return await run_in_greenlet(work, *arguments)


class RunAgain(Exception):
    """Raised by a unit of work that lost a race its own statement cannot settle (an insert of
    an external id that another transaction inserted after its lookup, and committed):
    ``Database.run`` rolls it back and runs its work again, which then finds what the other
    wrote, at most ``RUNS`` times in all; ``outcome`` is what the last one answers."""

    def __init__(self, outcome: Exception) -> None:
        super().__init__(str(outcome))
        self.outcome = outcome


# How many times ``Database.run`` runs a unit of work that keeps losing races (``RunAgain``).
RUNS = 3


@dataclass(frozen=True, slots=True)
class AfterCommit(Generic[T]):
    """What a unit of work's work returns when its result is made from rows that go with the
    COMMIT (``TenantConnection.defer``): ``Database.run`` calls ``read`` once committed. A
    caller that needs the result before (to store it in the same transaction) calls ``read``
    itself, and the deferred statements go then."""

    read: Callable[[], T]


# A connection's states with a transaction open (a failed one's included).
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


async def _rolled_back(connection: psycopg.AsyncConnection[Any]) -> None:
    """Ends the transaction a failed unit of work left open, as the pool's ``connection()``
    did (a connection given back in one is rolled back by the pool, with a warning)."""
    if connection.pgconn.transaction_status in _IN_TRANSACTION:
        with contextlib.suppress(psycopg.Error):
            await connection.rollback()


def _finished(work: Callable[[UnitOfWork], T | AfterCommit[T]], uow: UnitOfWork) -> T:
    """``work`` and the COMMIT in one greenlet."""
    result = work(uow)
    uow.finish()
    if isinstance(result, AfterCommit):
        return result.read()
    return result


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
    pinned in pyproject.toml; tests/tenancy/database/test_database_tenant_affinity.py fails if it is no
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


class Database:
    """Units of work (tenant data) on psycopg pools; the control schema through SQLAlchemy.

    The server runs units of work on the event loop (``run``, the asynchronous pool); the CLI
    and the tests open them synchronously (``unit_of_work``, the synchronous pool). Neither pool
    connects before its first unit of work.

    ``prepared_statements=False`` keeps psycopg from preparing statements on the server, which a
    pgbouncer in transaction mode cannot keep (the next transaction may land on another server
    connection). ``startup_options=False`` sends no ``options`` (the time limits) when
    connecting, which pgbouncer refuses; its ``connect_query`` sets them then.
    ``tenant_affinity=False`` takes any idle connection, where which backend serves a
    transaction is not the pool's to choose (pgbouncer in transaction mode).
    """

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 10,
        prepared_statements: bool = True,
        startup_options: bool = True,
        limits: DatabaseLimits = DatabaseLimits(),
        tenants_per_connection: int | None = None,
        tenant_affinity: bool = True,
    ) -> None:
        self.url = database_url
        self._tenant_affinity = tenant_affinity
        self.limits = limits
        self._connection_tenants = ConnectionTenants(tenants_per_connection)
        # Operators (and tests) see in pg_stat_activity which process holds a connection.
        connection_settings: dict[str, Any] = {
            "application_name": application_name(os.getpid()),
            "prepare_threshold": PREPARE_AFTER if prepared_statements else None,
            "connect_timeout": max(1, round(limits.acquire_timeout_seconds)),
        }
        if startup_options:
            connection_settings["options"] = limits.connection_options()
        # Units of work send their own BEGIN, with the switch to the tenant's role and their first
        # statement (``TenantConnection``); psycopg would send a BEGIN of its own first. They
        # prepare their statements themselves (``ServerPrepared``), not through psycopg.
        unit_of_work_settings = {
            **connection_settings,
            "autocommit": True,
            "prepare_threshold": None,
        }
        self.engine: Engine = create_engine(
            sqlalchemy_url(database_url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_recycle=1800,
            # A connection that broke while idle (PostgreSQL restarted) is replaced, not used.
            pool_pre_ping=True,
            pool_timeout=limits.acquire_timeout_seconds,
            connect_args=connection_settings,
        )
        # reconnect_timeout: a failed attempt to connect is retried with a growing delay for
        # this long, and no other attempt starts meanwhile; kept short, the first request after
        # PostgreSQL is back connects at once instead of after the delay reached while it was
        # down (16 s after 30 s down).
        pool_timeouts: dict[str, Any] = {
            "timeout": limits.acquire_timeout_seconds,
            "reconnect_timeout": limits.acquire_timeout_seconds,
        }
        self.pool: ConnectionPool = ConnectionPool(
            libpq_url(database_url),
            min_size=0,
            max_size=pool_size + max_overflow,
            max_lifetime=1800,
            kwargs=unit_of_work_settings,
            name="units-of-work",
            open=True,
            **pool_timeouts,
        )
        # Opened by ``open``, in the event loop it then belongs to.
        self._async_pool_loop: asyncio.AbstractEventLoop | None = None
        self._pool_check: asyncio.Task[None] | None = None
        self._conninfo = libpq_url(database_url)
        self._connection_settings = unit_of_work_settings
        self.async_pool = TenantAffinePool(
            libpq_url(database_url),
            tenants=self._connection_tenants,
            min_size=0,
            max_size=pool_size + max_overflow,
            max_lifetime=1800,
            kwargs=unit_of_work_settings,
            name="units-of-work-on-the-event-loop",
            open=False,
            **pool_timeouts,
        )
        self.statements = StatementCache(self.engine.dialect)
        self.server_prepared = ServerPrepared(PREPARE_AFTER) if prepared_statements else None
        # Called with the SQL of every statement a unit of work runs (tests count them).
        self.statement_listeners: list[StatementListener] = []
        # Called as each unit of work on the event loop starts, with whether its connection had
        # already worked in its tenant (the metrics count both); not with tenant affinity off.
        self.on_connection_warmth: Callable[[bool], None] | None = None

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[UnitOfWork]:
        """A transaction whose SQL lands in ``scope.schema``, run as the tenant's role; commits on
        success, else rolls back.

        The schema is written into each statement's text and the role is set for the transaction
        only, so the pooled connection (or a pgbouncer server connection in transaction mode)
        carries no tenant state to its next user.
        """
        with database_faults(), self.pool.connection() as connection:
            self._connection_tenants.worked_in(connection, scope.schema)
            role = tenant_role(scope.schema)
            statements = TenantConnection(
                connection,
                scope.schema,
                self.statements,
                self.statement_listeners,
                begin=switch_to(role),
                role=role,
                prepared=self.server_prepared,
            )
            uow = UnitOfWork(statements, scope)
            yield uow
            uow.finish()

    async def open(self) -> None:
        """Opens the asynchronous pool in the running event loop, which it then belongs to (the
        server's: the app's lifespan opens it)."""
        await self.async_pool.open()
        self._async_pool_loop = asyncio.get_running_loop()

    @asynccontextmanager
    async def unit_of_work_on_event_loop(self, scope: Scope) -> AsyncIterator[UnitOfWork]:
        """``unit_of_work`` on the asynchronous pool; its work goes through ``run_on_event_loop``.

        On any loop but the pool's (a test client driving the app without its lifespan starts
        one per request) the unit of work gets a connection of its own, closed with it.
        """
        connection: psycopg.AsyncConnection[Any] | None = None
        with database_faults():
            try:
                connection = await self._take(scope.schema if self._tenant_affinity else None)
                try:
                    if self._tenant_affinity and self.on_connection_warmth is not None:
                        self.on_connection_warmth(
                            self._connection_tenants.knows(connection, scope.schema)
                        )
                    self._connection_tenants.worked_in(connection, scope.schema)
                    role = tenant_role(scope.schema)
                    statements = TenantConnection(
                        connection,
                        scope.schema,
                        self.statements,
                        self.statement_listeners,
                        begin=switch_to(role),
                        role=role,
                        prepared=self.server_prepared,
                    )
                    uow = UnitOfWork(statements, scope)
                    yield uow
                    if not statements.committed:
                        # Platform code: its statements await on the event loop from a greenlet.
                        await run_on_event_loop(UnitOfWork.finish, uow)
                except BaseException:
                    await _rolled_back(connection)
                    raise
                finally:
                    await self._give_back(connection)
            except psycopg.OperationalError:
                lost = connection is not None and connection.broken
                if lost and self._async_pool_loop is asyncio.get_running_loop():
                    # Its peers in the pool likely broke alike (PostgreSQL restarted): drop
                    # them now rather than fail one request each. (Not after a timeout or a
                    # deadlock: the connection is fine then.)
                    self._check_pool_soon()
                raise

    async def _take(self, schema: str | None = None) -> psycopg.AsyncConnection[Any]:
        """A connection of the asynchronous pool (warm for ``schema`` when one is idle), or on
        any loop but the pool's one of its own; ``_give_back`` returns or closes it. Not through
        the pool's ``connection()``: its context managers made taking and giving back a
        connection cost 15 µs instead of 5 to 10 (bench/README.md)."""
        if asyncio.get_running_loop() is self._async_pool_loop:
            return await self.async_pool.getconn_for(schema)
        return await psycopg.AsyncConnection.connect(self._conninfo, **self._connection_settings)

    async def _give_back(self, connection: psycopg.AsyncConnection[Any]) -> None:
        if asyncio.get_running_loop() is self._async_pool_loop:
            await self.async_pool.putconn(connection)
        else:
            await connection.close()

    def _check_pool_soon(self) -> None:
        if self._pool_check is None or self._pool_check.done():
            self._pool_check = asyncio.get_running_loop().create_task(self.async_pool.check())

    def pool_usage(self) -> tuple[int, int, int]:
        """The event loop's pool: connections in use, idle, and requests waiting for one."""
        stats = self.async_pool.get_stats()
        idle = stats.get("pool_available", 0)
        return stats.get("pool_size", 0) - idle, idle, stats.get("requests_waiting", 0)

    async def ping(self) -> None:
        """Returns once PostgreSQL answers a statement on the event loop's pool; raises
        DatabaseUnavailable (or DatabaseTimeout) otherwise, within the acquire timeout."""
        with database_faults():
            try:
                async with asyncio.timeout(self.limits.acquire_timeout_seconds):
                    connection = await self._take()
                    try:
                        await connection.execute("SELECT 1")
                    finally:
                        await self._give_back(connection)
            except TimeoutError as exc:
                raise PoolTimeout("PostgreSQL did not answer in time") from exc

    async def read(self, scope: Scope, work: Callable[[UnitOfWork], T]) -> T:
        """``run`` for a read that one statement answers: ``BEGIN``, the role switch, the
        statement and ``COMMIT`` in one round trip (``TenantConnection.commit_with_next``); a
        second statement of ``work`` is refused."""
        async with self.unit_of_work_on_event_loop(scope) as uow:
            uow.connection.commit_with_next()
            return await run_on_event_loop(work, uow)

    async def run(self, scope: Scope, work: Callable[[UnitOfWork], T | AfterCommit[T]]) -> T:
        """``work`` in a unit of work of its own, committed if it returns, without a thread;
        an ``AfterCommit`` it returns is read once committed. A unit of work that lost a race
        (``RunAgain``) runs again, in a transaction of its own."""
        runs = 0
        while True:
            runs += 1
            try:
                async with self.unit_of_work_on_event_loop(scope) as uow:
                    return await run_on_event_loop(_finished, work, uow)
            except RunAgain as lost:
                if runs == RUNS:
                    raise lost.outcome from lost

    def run_here(self, scope: Scope, work: Callable[[UnitOfWork], T | AfterCommit[T]]) -> T:
        """``run`` on the calling thread, with the synchronous pool (a script, a test)."""
        runs = 0
        while True:
            runs += 1
            try:
                with self.unit_of_work(scope) as uow:
                    result = work(uow)
                return result.read() if isinstance(result, AfterCommit) else result
            except RunAgain as lost:
                if runs == RUNS:
                    raise lost.outcome from lost

    @contextmanager
    def control(self) -> Iterator[Connection]:
        """A transaction on the control schema (tenants, keys)."""
        with database_faults(), self.engine.begin() as connection:
            yield connection

    async def close(self) -> None:
        """Closes every pool; call it in the event loop ``open`` ran in."""
        if self._async_pool_loop is not None:
            await self.async_pool.close()
            self._async_pool_loop = None
        self.dispose()

    def dispose(self) -> None:
        self.pool.close()
        self.engine.dispose()
