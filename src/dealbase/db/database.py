"""The Database: the pools, the units of work on them, and the control schema's engine."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from time import monotonic
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import make_url

from dealbase.config import Settings
from dealbase.db.faults import database_faults
from dealbase.db.greenlets import run_in_greenlet
from dealbase.db.pool import ConnectionTenants, PoolSettings, TenantAffinePool
from dealbase.db.sessions import Sessions
from dealbase.db.statements import StatementCache, StatementListener
from dealbase.db.transactions import TenantConnection
from dealbase.db.units import RUNS, AfterCommit, RunAgain, UnitOfWork
from dealbase.db.worker_reads import Placements, WorkerNode, WorkerReads, node_of_schema
from dealbase.tenancy.scope import Scope, tenant_role

T = TypeVar("T")

# psycopg prepares a statement on the server once a connection has run it this many times (its
# default), and keeps at most its ``prepared_max`` (100) there, the least recently used
# deallocated first: a backend's memory stays bounded however many tenants' schemas (each with
# statements of its own) it works in.
PREPARE_AFTER = 5


# How long any pool keeps a connection before it opens a new one instead.
_CONNECTION_LIFETIME_SECONDS = 1800


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

    @classmethod
    def of(cls, settings: Settings) -> DatabaseLimits:
        return cls(
            statement_timeout_ms=settings.db_statement_timeout_ms,
            lock_timeout_ms=settings.db_lock_timeout_ms,
            acquire_timeout_seconds=settings.db_acquire_timeout_ms / 1000,
        )

    def connection_options(self) -> str:
        return (
            f"-c statement_timeout={self.statement_timeout_ms}"
            f" -c lock_timeout={self.lock_timeout_ms}"
        )


async def run_on_event_loop(work: Callable[..., T], *arguments: Any) -> T:
    """``work(*arguments)``, synchronous platform code, run so that the awaits of an
    asynchronous unit of work go to the event loop: no thread hop, a greenlet switch per round
    trip instead (``greenlets``)."""
    return await run_in_greenlet(work, *arguments)


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


def _connection_settings(
    limits: DatabaseLimits, prepared_statements: bool, startup_options: bool
) -> dict[str, Any]:
    """What every connection of the Database is opened with."""
    settings: dict[str, Any] = {
        # Operators (and tests) see in pg_stat_activity which process holds a connection.
        "application_name": application_name(os.getpid()),
        "prepare_threshold": PREPARE_AFTER if prepared_statements else None,
        "connect_timeout": max(1, round(limits.acquire_timeout_seconds)),
    }
    if startup_options:
        settings["options"] = limits.connection_options()
    return settings


def _control_engine(
    database_url: str,
    pool_size: int,
    max_overflow: int,
    limits: DatabaseLimits,
    connection_settings: dict[str, Any],
) -> Engine:
    """SQLAlchemy's engine, for the control schema."""
    return create_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=_CONNECTION_LIFETIME_SECONDS,
        # A connection that broke while idle (PostgreSQL restarted) is replaced, not used.
        pool_pre_ping=True,
        pool_timeout=limits.acquire_timeout_seconds,
        connect_args=connection_settings,
    )


@dataclass(frozen=True, slots=True)
class _UnitOfWorkPools:
    """The pools units of work run on: alike, but for where and how a connection is taken."""

    conninfo: str
    max_size: int
    limits: DatabaseLimits
    # Every connection's settings (``_connection_settings``), and autocommit.
    settings: dict[str, Any]
    tenants: ConnectionTenants

    @classmethod
    def of(
        cls,
        database_url: str,
        max_size: int,
        limits: DatabaseLimits,
        connection_settings: dict[str, Any],
        tenants: ConnectionTenants,
    ) -> _UnitOfWorkPools:
        # Units of work open their transaction themselves, with the switch to the tenant's role
        # and their first statement, or run as one implicit transaction (``TenantConnection``):
        # psycopg would send a BEGIN of its own first, and sync the pipeline after it.
        settings = {**connection_settings, "autocommit": True}
        return cls(libpq_url(database_url), max_size, limits, settings, tenants)

    def synchronous(self) -> ConnectionPool:
        """The CLI's and the tests' pool (``unit_of_work``)."""
        # reconnect_timeout: a failed attempt to connect is retried with a growing delay for
        # this long, and no other attempt starts meanwhile; kept short, the first request after
        # PostgreSQL is back connects at once instead of after the delay reached while it was
        # down.
        return ConnectionPool(
            self.conninfo,
            min_size=0,
            max_size=self.max_size,
            max_lifetime=_CONNECTION_LIFETIME_SECONDS,
            kwargs=self.settings,
            # A connection retired by ConnectionTenants is closed when next taken.
            check=self.tenants.refuse_retired,
            name="units-of-work",
            open=True,
            timeout=self.limits.acquire_timeout_seconds,
            reconnect_timeout=self.limits.acquire_timeout_seconds,
        )

    def pool_settings(self) -> PoolSettings:
        return PoolSettings(
            tenants=self.tenants,
            max_size=self.max_size,
            timeout=self.limits.acquire_timeout_seconds,
            max_lifetime=_CONNECTION_LIFETIME_SECONDS,
            kwargs=self.settings,
        )

    def on_the_event_loop(self) -> TenantAffinePool:
        return TenantAffinePool(
            self.conninfo, self.pool_settings(), name="units-of-work-on-the-event-loop"
        )

    def on_the_workers(self, placements: Placements) -> WorkerReads:
        return WorkerReads(self.conninfo, placements, self.pool_settings())


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
    ``sessions=False`` switches every transaction of the event loop's pool to its tenant's role
    (and a statement's settings) for that transaction only, where a connection's session state
    may reach another transaction (pgbouncer in transaction mode); else a connection keeps the
    role and the settings of the unit of work that last committed on it (``Sessions``). ``pipelines=False`` sends a round trip's statements
    one at a time, each transaction with its ``BEGIN`` and ``COMMIT``, for a pooler that loses
    track of pipelines (pgbouncer in transaction mode, ``TenantConnection``).
    ``reads_on_workers=True`` (with ``distributed_schemas``, on a Citus cluster reached
    directly) serves ``read`` on a pool of connections to the worker that holds the tenant's
    schema (``worker_reads``), where each schema lives looked up on the coordinator and believed
    for a while by ``clock`` (monotonic, in seconds).
    """

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 0,
        prepared_statements: bool = True,
        startup_options: bool = True,
        limits: DatabaseLimits = DatabaseLimits(),
        tenants_per_connection: int | None = None,
        tenant_affinity: bool = True,
        sessions: bool = True,
        pipelines: bool = True,
        distributed_schemas: bool = False,
        reads_on_workers: bool = False,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        if reads_on_workers and not distributed_schemas:
            raise ValueError("reads on the workers need distributed schemas (a Citus cluster)")
        self.url = database_url
        # Tenant schemas are Citus distributed schemas (``TenantConnection.distributed``).
        self.distributed_schemas = distributed_schemas
        self._tenant_affinity = tenant_affinity
        # What the event loop's pool's connections keep between units of work.
        self.sessions = Sessions() if sessions else None
        self._pipelines = pipelines
        self.limits = limits
        self._connection_tenants = ConnectionTenants(tenants_per_connection)
        connection_settings = _connection_settings(limits, prepared_statements, startup_options)
        self.engine: Engine = _control_engine(
            database_url, pool_size, max_overflow, limits, connection_settings
        )
        self._make_pools(
            _UnitOfWorkPools.of(
                database_url,
                pool_size + max_overflow,
                limits,
                connection_settings,
                self._connection_tenants,
            ),
            reads_on_workers,
            clock,
        )
        self._make_statement_observers()

    def _make_pools(
        self, pools: _UnitOfWorkPools, reads_on_workers: bool, clock: Callable[[], float]
    ) -> None:
        """The units of work's pools: the synchronous one, the event loop's, the workers'."""
        self.pool: ConnectionPool = pools.synchronous()
        # Opened by ``open``, in the event loop it then belongs to.
        self._async_pool_loop: asyncio.AbstractEventLoop | None = None
        self.async_pool = pools.on_the_event_loop()
        # Each tenant's reads on its worker's pool, the same but for the host and port.
        self.worker_reads = (
            pools.on_the_workers(Placements(self._node_of_schema, clock=clock))
            if reads_on_workers
            else None
        )
        # The task checking each pool's idle connections, when one runs.
        self._pool_checks: dict[TenantAffinePool, asyncio.Task[None]] = {}

    def _make_statement_observers(self) -> None:
        """The statements units of work run, and who is told of them and of their connections."""
        self.statements = StatementCache()
        # Called with the SQL of every statement a unit of work runs (tests count them).
        self.statement_listeners: list[StatementListener] = []
        # Called as each unit of work on the event loop starts, with whether its connection had
        # already worked in its tenant (the metrics count both); not with tenant affinity off.
        self.on_connection_warmth: Callable[[bool], None] | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        database_url: str,
        *,
        pool_size: int,
        max_overflow: int,
        limits: DatabaseLimits | None = None,
        reads_on_workers: bool = False,
        clock: Callable[[], float] = monotonic,
    ) -> Database:
        """The Database the settings describe, at ``database_url`` (``settings.database_url``,
        or the embedded server's the caller started): through pgbouncer in transaction mode,
        with each of its restrictions; on a Citus cluster, on distributed schemas.

        The pool's size is the caller's, since the server, a webhook worker and an operator's
        command each need their own; ``limits`` are the settings' unless given.
        """
        through_pgbouncer = settings.db_pgbouncer
        return cls(
            database_url,
            pool_size=pool_size,
            max_overflow=max_overflow,
            prepared_statements=settings.db_prepared_statements and not through_pgbouncer,
            startup_options=not through_pgbouncer,
            limits=DatabaseLimits.of(settings) if limits is None else limits,
            tenants_per_connection=settings.tenants_per_connection(),
            tenant_affinity=not through_pgbouncer,
            sessions=not through_pgbouncer,
            pipelines=not through_pgbouncer,
            distributed_schemas=settings.citus_schema_sharding,
            reads_on_workers=reads_on_workers,
            clock=clock,
        )

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[UnitOfWork]:
        """A transaction whose SQL lands in ``scope.schema``, run as the tenant's role; commits on
        success, else rolls back.

        The schema is written into each statement's text and the role is set for the transaction
        only: the CLI's and the tests' pooled connections carry no tenant state to their next
        user (the event loop's may keep the role, ``Sessions``).
        """
        with database_faults(), self.pool.connection() as connection:
            uow = self._unit_of_work(connection, scope, None)
            yield uow
            uow.finish()

    def _unit_of_work(
        self,
        connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
        scope: Scope,
        sessions: Sessions | None,
    ) -> UnitOfWork:
        """A unit of work on ``connection`` in ``scope``'s tenant, as its role."""
        self._connection_tenants.worked_in(connection, scope.schema)
        statements = TenantConnection(
            connection,
            scope.schema,
            self.statements,
            self.statement_listeners,
            role=tenant_role(scope.schema),
            sessions=sessions,
            pipelines=self._pipelines,
            distributed=self.distributed_schemas,
        )
        return UnitOfWork(statements, scope)

    async def open(self) -> None:
        """Opens the asynchronous pool in the running event loop, which it then belongs to (the
        server's: the app's lifespan opens it)."""
        self.async_pool.open()
        if self.worker_reads is not None:
            self.worker_reads.open()
        self._async_pool_loop = asyncio.get_running_loop()

    @asynccontextmanager
    async def unit_of_work_on_event_loop(
        self, scope: Scope, *, reading: bool = False
    ) -> AsyncIterator[UnitOfWork]:
        """``unit_of_work`` on the asynchronous pool; its work goes through ``run_on_event_loop``.
        ``reading``: its work only reads, and with ``reads_on_workers`` runs on the pool of the
        worker holding the tenant's schema.

        On any loop but the pool's (a test client driving the app without its lifespan starts
        one per request) the unit of work gets a connection of its own, closed with it.
        """
        connection: psycopg.AsyncConnection[Any] | None = None
        with database_faults():
            pool = self.async_pool
            try:
                if reading and self.worker_reads is not None:
                    pool = await self.worker_reads.pool_of(scope.schema) or pool
                connection = await self._take(pool, scope.schema if self._tenant_affinity else None)
                try:
                    if self._tenant_affinity and self.on_connection_warmth is not None:
                        self.on_connection_warmth(
                            self._connection_tenants.knows(connection, scope.schema)
                        )
                    uow = self._unit_of_work(connection, scope, self.sessions)
                    yield uow
                    if not uow.connection.committed:
                        # Platform code: its statements await on the event loop from a greenlet.
                        await run_on_event_loop(UnitOfWork.finish, uow)
                except BaseException:
                    await _rolled_back(connection)
                    raise
                finally:
                    await self._give_back(pool, connection)
            except psycopg.OperationalError:
                lost = connection is not None and connection.broken
                if lost and self._async_pool_loop is asyncio.get_running_loop():
                    # Its peers in the pool likely broke alike (PostgreSQL restarted): drop
                    # them now rather than fail one request each. (Not after a timeout or a
                    # deadlock: the connection is fine then.)
                    self._check_pool_soon(pool)
                raise

    async def _take(
        self, pool: TenantAffinePool, schema: str | None = None
    ) -> psycopg.AsyncConnection[Any]:
        """A connection of ``pool`` (warm for ``schema`` when one is idle), or on any loop but
        the pools' one of its own, with the pool's conninfo and settings; ``_give_back`` returns
        or closes it. No context manager: psycopg_pool's ``connection()`` adds a generator's
        context manager to taking and giving back a connection, on every unit of work."""
        if asyncio.get_running_loop() is self._async_pool_loop:
            return await pool.take(schema)
        return await psycopg.AsyncConnection.connect(pool.conninfo, **pool.settings.kwargs)

    async def _give_back(
        self, pool: TenantAffinePool, connection: psycopg.AsyncConnection[Any]
    ) -> None:
        if asyncio.get_running_loop() is self._async_pool_loop:
            await pool.give_back(connection)
        else:
            await connection.close()

    def _check_pool_soon(self, pool: TenantAffinePool) -> None:
        check = self._pool_checks.get(pool)
        if check is None or check.done():
            self._pool_checks[pool] = asyncio.get_running_loop().create_task(pool.check())

    async def _node_of_schema(self, schema: str) -> WorkerNode | None:
        """Where ``schema`` lives, asked of the coordinator on a connection of its pool."""
        connection = await self._take(self.async_pool)
        try:
            return await node_of_schema(connection, schema)
        finally:
            await self._give_back(self.async_pool, connection)

    def pool_usage(self) -> tuple[int, int, int]:
        """The event loop's pools (the coordinator's, and the workers' with
        ``reads_on_workers``): connections in use, idle, and requests waiting for one."""
        stats = self.async_pool.stats()
        usage = stats.size - stats.idle, stats.idle, stats.waiting
        if self.worker_reads is None:
            return usage
        on_workers = self.worker_reads.usage()
        return usage[0] + on_workers[0], usage[1] + on_workers[1], usage[2] + on_workers[2]

    async def ping(self) -> None:
        """Returns once PostgreSQL answers a statement on the event loop's pool; raises
        DatabaseUnavailable (or DatabaseTimeout) otherwise, within the acquire timeout."""
        with database_faults():
            try:
                async with asyncio.timeout(self.limits.acquire_timeout_seconds):
                    connection = await self._take(self.async_pool)
                    try:
                        await connection.execute("SELECT 1")
                    finally:
                        await self._give_back(self.async_pool, connection)
            except TimeoutError as exc:
                raise PoolTimeout("PostgreSQL did not answer in time") from exc

    async def read(self, scope: Scope, work: Callable[[UnitOfWork], T]) -> T:
        """``run`` for a read that one statement answers: ``BEGIN``, the role switch, the
        statement and ``COMMIT`` in one round trip (``TenantConnection.commit_with_next``); a
        second statement of ``work`` is refused. With ``reads_on_workers``, on the worker that
        holds the tenant's schema."""
        async with self.unit_of_work_on_event_loop(scope, reading=True) as uow:
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
            if self.worker_reads is not None:
                await self.worker_reads.close()
            self._async_pool_loop = None
        self.dispose()

    def dispose(self) -> None:
        self.pool.close()
        self.engine.dispose()
