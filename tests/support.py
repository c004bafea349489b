"""Shared test helpers: real databases, and tenants built the way operators build them."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Self

import httpx
import psycopg
import pytest
import structlog
from psycopg import sql
from sqlalchemy import Table, func, select, text
from structlog.testing import capture_logs

from dealbase.db.database import Database
from dealbase.migrations.runner import upgrade_control
from dealbase.ops import admin
from dealbase.platform.pipeline.models import Department
from dealbase.tenancy.control_tables import CONTROL_SCHEMA
from dealbase.tenancy.registry.tenants import Tenant, create_tenant
from dealbase.tenancy.roles import TENANT_OWNER_ROLE, TENANTS_GROUP_ROLE, ensure_shared_roles
from dealbase.tenancy.scope import Scope

IN_CI = os.environ.get("CI", "").lower() == "true"


def server_url(tmp_dir: Path) -> str:
    """The PostgreSQL server the tests use: DEALBASE_TEST_DATABASE_URL, else an embedded one.

    Under CI=true the variable must be set (``.ci/run`` sets it): CI tests the real server.
    """
    url = os.environ.get("DEALBASE_TEST_DATABASE_URL")
    if url:
        try:
            psycopg.connect(url, connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            raise RuntimeError(f"DEALBASE_TEST_DATABASE_URL is set but unreachable: {exc}") from exc
        return url
    if IN_CI:
        raise RuntimeError("CI=true but DEALBASE_TEST_DATABASE_URL is not set: .ci/run sets it.")
    from dealbase.ops.embedded_postgres import embedded_database_url

    url = embedded_database_url(tmp_dir)
    # The tests' own cluster holds scratch databases only: without durability, a session's
    # DROP DATABASE no longer waits for a checkpoint to flush every tenant schema it made.
    with psycopg.connect(url, autocommit=True) as connection:
        for setting in ("fsync", "full_page_writes", "synchronous_commit"):
            connection.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        connection.execute("SELECT pg_reload_conf()")
    return url


# Set by `make test` for its second pass of the REST and GraphQL tests: the apps the tests build
# then reach PostgreSQL through the pgbouncer at DEALBASE_TEST_PGBOUNCER_URL (transaction mode,
# a server pool of 1); the tests' own checks and set-up still connect directly.
THROUGH_PGBOUNCER = os.environ.get("DEALBASE_TEST_THROUGH_PGBOUNCER") == "1"


def through_pgbouncer(database_url: str) -> str:
    """The same database, reached through the tests' pgbouncer."""
    pgbouncer = os.environ.get("DEALBASE_TEST_PGBOUNCER_URL")
    if not pgbouncer:
        raise RuntimeError(
            "DEALBASE_TEST_THROUGH_PGBOUNCER=1 needs DEALBASE_TEST_PGBOUNCER_URL"
            " (.ci/start-pgbouncer prints one)"
        )
    return _with_database(pgbouncer, database_url.partition("?")[0].rpartition("/")[2])


@contextmanager
def scratch_database(server: str, label: str) -> Iterator[str]:
    """A database of its own on ``server``, dropped afterwards."""
    name = f"dealbase_test_{label}_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = _with_database(server, name)
    try:
        yield url
    finally:
        try:
            roles = tenant_roles_of(url)
        except psycopg.Error:  # a test left it unreachable: its roles stay behind
            roles = []
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            # Roles belong to the cluster and outlive the database; their grants did not.
            if roles:
                connection.execute(
                    sql.SQL("DROP ROLE IF EXISTS {}").format(
                        sql.SQL(", ").join(map(sql.Identifier, roles))
                    )
                )


@contextmanager
def database_at(url: str, pool_size: int = 1) -> Iterator[Database]:
    """A ``Database`` at ``url`` (of one connection unless told), disposed after the block."""
    database = Database(url, pool_size=pool_size)
    try:
        yield database
    finally:
        database.dispose()


@asynccontextmanager
async def opened_database(url: str) -> AsyncIterator[Database]:
    """A ``Database`` at ``url`` of one connection and no overflow, opened on the running event
    loop and closed after the block."""
    database = Database(url, pool_size=1, max_overflow=0)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


def control_at_head(database: Database) -> None:
    """Upgrades ``database``'s control schema to head, as ``dealbase migrate`` does first."""
    with database.control() as connection:
        upgrade_control(connection)


@contextmanager
def migrated_scratch_database(server: str, label: str) -> Iterator[str]:
    """``scratch_database``, its control schema at head; tests make their own tenants."""
    with scratch_database(server, label) as url:
        with database_at(url) as database:
            control_at_head(database)
        yield url


@contextmanager
def own_database_at_head(server: str, label: str) -> Iterator[Database]:
    """A ``Database`` of two connections on a database of its own on ``server``, its control
    schema at head: what a test makes there no other test's tenants can take."""
    with migrated_scratch_database(server, label) as url, database_at(url, pool_size=2) as own:
        yield own


@contextmanager
def non_superuser_login(
    postgres_server: str, *, inherit: bool = False
) -> Iterator[tuple[str, str]]:
    """A login role as operators create one for the service (NOINHERIT, CREATEROLE, owning its
    database), and that database; both dropped afterwards. Yields the role and its URL."""
    login = f"dealbase_test_login_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_server, autocommit=True) as admin_connection:
        admin_connection.execute(
            sql.SQL("CREATE ROLE {} LOGIN {} CREATEROLE").format(
                sql.Identifier(login), sql.SQL("INHERIT" if inherit else "NOINHERIT")
            )
        )
        # The cluster's shared roles were made by the superuser (other tests): from PostgreSQL
        # 16 only a holder of their ADMIN option may grant them, so the operator hands it over,
        # as operations.md says to when the login role changes.
        version = admin_connection.execute("SHOW server_version_num").fetchone()
        if version is not None and int(version[0]) >= 160000:
            # Made here if no test made them yet: one made by a test in parallel after this
            # grant would leave the login role without the option (an order-dependent failure).
            with database_at(postgres_server) as superuser, superuser.control() as connection:
                ensure_shared_roles(connection)
            for shared in (TENANT_OWNER_ROLE, TENANTS_GROUP_ROLE):
                admin_connection.execute(
                    sql.SQL(
                        "DO $$ BEGIN IF to_regrole({shared_name}) IS NOT NULL THEN"
                        " GRANT {shared} TO {login} WITH ADMIN OPTION; END IF; END $$"
                    ).format(
                        shared_name=sql.Literal(shared),
                        shared=sql.Identifier(shared),
                        login=sql.Identifier(login),
                    )
                )
    try:
        with scratch_database(postgres_server, "login") as url:
            with psycopg.connect(url, autocommit=True) as admin_connection:
                admin_connection.execute(
                    sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(login))
                )
            with psycopg.connect(postgres_server, autocommit=True) as admin_connection:
                admin_connection.execute(
                    sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                        sql.Identifier(url.partition("?")[0].rpartition("/")[2]),
                        sql.Identifier(login),
                    )
                )
            yield login, _with_user(url, login)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin_connection:
            admin_connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))


def _with_user(url: str, user: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user}@{rest.partition('@')[2] or rest}"


def schema_and_role_exist(database_url: str, name: str) -> tuple[bool, bool]:
    """Whether the schema ``name`` exists, and whether the role ``name`` does."""
    with psycopg.connect(database_url) as connection:
        row = connection.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(name)s),"
            " EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %(name)s)",
            {"name": name},
        ).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


def tenant_roles_of(database_url: str) -> list[str]:
    """The tenant roles of the database (each named as its schema): of the tenant schemas in
    it, and of the tenants it registers whose schema a test dropped."""
    with psycopg.connect(database_url) as connection:
        registered = connection.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{CONTROL_SCHEMA}.tenants",)
        ).fetchone()
        names = (
            sql.SQL(" UNION SELECT schema_name FROM {}").format(
                sql.Identifier(CONTROL_SCHEMA, "tenants")
            )
            if registered and registered[0]
            else sql.SQL("")
        )
        rows = connection.execute(
            sql.SQL(
                "SELECT r.rolname FROM pg_roles r"
                " JOIN (SELECT nspname::text AS name FROM pg_namespace{names}) s"
                " ON s.name = r.rolname WHERE r.rolname ~ '^t_[0-9a-f]{{32}}$'"
            ).format(names=names)
        ).fetchall()
    return [name for (name,) in rows]


def database_on(
    server: str, host: str | None = None, port: int | None = None, *, database: str = "postgres"
) -> str:
    """The URL of ``database`` on ``server``'s user and scheme, at ``host``:``port`` if given."""
    url = _with_database(server, database)
    if host is None:
        return url
    scheme, _, rest = url.partition("://")
    credentials, _, location = rest.rpartition("@")
    _, _, path = location.partition("/")
    return f"{scheme}://{credentials}{'@' if credentials else ''}{host}:{port}/{path}"


def _with_database(server: str, database: str) -> str:
    """The URL ``server`` with its database name replaced (keeping ``?host=`` and the like)."""
    base, _, query = server.partition("?")
    scheme_and_host, _, _ = base.rpartition("/")
    return f"{scheme_and_host}/{database}" + (f"?{query}" if query else "")


@dataclass(frozen=True)
class Credentials:
    key_id: uuid.UUID
    api_key: str
    department_id: uuid.UUID

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Api-Key": self.api_key, "X-Department-Id": str(self.department_id)}


@dataclass(frozen=True)
class TenantWorld:
    """A tenant with departments, each with a key, made through the operator workflows."""

    tenant: Tenant
    departments: tuple[Department, ...]
    keys: tuple[Credentials, ...]

    @property
    def department(self) -> Department:
        return self.departments[0]

    @property
    def key(self) -> Credentials:
        return self.keys[0]


def build_tenant(
    database: Database, *, departments: int = 1, distributed: bool = False
) -> TenantWorld:
    tenant = create_tenant(database, f"tenant-{secrets.token_hex(6)}", distributed=distributed)
    made, keys = [], []
    for index in range(departments):
        department = admin.create_department(database, tenant.id, f"Department {index + 1}")
        issued = admin.issue_key(database, tenant.id, department.id, f"key {index + 1}")
        made.append(department)
        keys.append(Credentials(issued.key_id, issued.api_key, department.id))
    return TenantWorld(tenant, tuple(made), tuple(keys))


# How long a test waits for what holds within milliseconds (a notice, a reconnection) before it
# fails: a bound for failing, not a margin to pass.
CONDITION_TIMEOUT_S = 10.0


def wait_until(
    condition: Callable[[], bool], what: str, seconds: float = CONDITION_TIMEOUT_S
) -> None:
    """Returns once ``condition()`` holds; fails, saying ``what`` did not come, after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {seconds} s"
        time.sleep(0.01)


def wait_until_a_transaction_waits_for_a_lock(
    database: Database, seconds: float = 10, *, or_until: Callable[[], bool] = lambda: False
) -> None:
    """Returns once a backend of ``database``'s database waits on a heavyweight lock (a row's or
    another transaction's), or once ``or_until()`` holds; fails after ``seconds``. Each look is a
    transaction of its own: within one, PostgreSQL shows the same snapshot of pg_stat_activity."""
    deadline = time.monotonic() + seconds
    while not or_until():
        with database.control() as connection:
            waiting = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        if waiting:
            return
        assert time.monotonic() < deadline, f"no transaction waited on a lock in {seconds} s"
        time.sleep(0.01)


def row_count(database: Database, scope: Scope, table: Table) -> int:
    """How many rows of ``table`` a unit of work in ``scope`` sees."""
    with database.unit_of_work(scope) as uow:
        count: int = uow.connection.execute(select(func.count()).select_from(table)).scalar_one()
        return count


class FakeClock:
    """A monotonic clock in seconds that only the test moves (far from zero, like a real one)."""

    def __init__(self, start: float = 987_654.321) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class LoopClock:
    """A ``FakeClock`` for event loops: a loop made by ``new_loop`` (a TestClient's
    ``backend_options={"loop_factory": ...}``, a uvicorn server's) reads its time from it, so its
    timers (``call_later``, ``asyncio.sleep``, ``asyncio.timeout``, ``asyncio.wait``'s timeout)
    fire only once the test moves it, and then before ``advance`` returns."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._loops: list[asyncio.AbstractEventLoop] = []

    def now(self) -> float:
        return self.clock.now

    def new_loop(self) -> asyncio.AbstractEventLoop:
        loop = _LoopOnAClock(self.clock)
        self._loops.append(loop)
        return loop

    def advance(self, seconds: float) -> None:
        """Moves the clock, and returns once each running loop has run what fell due."""
        self.clock.advance(seconds)
        for loop in self._loops:
            if loop.is_running():
                _turns_of(loop, 5)

    def advance_to(self, when: float) -> None:
        self.advance(when - self.clock.now)


class _LoopOnAClock(asyncio.SelectorEventLoop):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._fake_clock = clock

    def time(self) -> float:
        return self._fake_clock()


def _turns_of(loop: asyncio.AbstractEventLoop, turns: int, seconds: float = 30) -> None:
    """Returns once ``loop`` has run ``turns`` more turns. After a move of its clock: the first
    may have read its time before the move; the timers due by the second run in it, after this
    one's callback; the turns after it run what those timers woke (a task, and what it sends)."""
    done = threading.Event()

    def turn(left: int) -> None:
        if left:
            loop.call_soon(turn, left - 1)
        else:
            done.set()

    try:
        loop.call_soon_threadsafe(turn, turns - 1)
    except RuntimeError:  # closed since: nothing runs on it any more
        return
    deadline = time.monotonic() + seconds
    # A loop that stops (its server stopping) turns no more.
    while not done.wait(0.05) and loop.is_running():
        assert time.monotonic() < deadline, f"the event loop did not turn in {seconds} s"


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stops a server started in its own session: SIGTERM, then SIGKILL to the whole group."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


# How long a `dealbase serve` subprocess may take to answer: three interpreters importing the
# app (8 s on an idle 2-core machine) while the parallel test workers load the same cores.
SERVER_START_TIMEOUT_S = 90.0


def wait_until_served(
    process: subprocess.Popen[bytes], url: str, output: Callable[[], str], seconds: float
) -> None:
    """Returns once ``GET url`` answers 200; fails, with the server's ``output``, if the
    process exits or ``seconds`` pass first."""
    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, f"server exited: {output()}"
        assert time.monotonic() < deadline, f"server not ready: {output()}"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)


DEALBASE = Path(sys.executable).with_name("dealbase")


@dataclass(frozen=True)
class ServeProcess:
    """A ``dealbase serve`` of a test: its process, its URL, its environment and its output."""

    process: subprocess.Popen[bytes]
    base_url: str
    env: dict[str, str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def dealbase_serve(
    directory: Path, settings: dict[str, str], *options: str
) -> Iterator[ServeProcess]:
    """``dealbase serve OPTIONS`` on a free loopback port, in a session of its own, with none of
    the caller's DEALBASE_ settings or FORWARDED_ALLOW_IPS but ``settings`` (DEALBASE_DATA_DIR
    defaults to ``directory``); its output in ``directory/server.log``; stopped afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("DEALBASE_") and name != "FORWARDED_ALLOW_IPS"
    }
    env |= {"DEALBASE_DATA_DIR": str(directory), **settings}
    port = free_port()
    log = directory / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(DEALBASE), "serve", "--host", "127.0.0.1", "--port", str(port), *options],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield ServeProcess(process, f"http://127.0.0.1:{port}", env, log)
    finally:
        stop_process(process)


class ThreadsUntilStopped(ABC):
    """``count`` threads each running ``loop(index)`` while the ``with`` block runs: its end
    sets ``stopping``, which each loop watches, and joins them."""

    def __init__(self, count: int, join_seconds: float) -> None:
        self.stopping = threading.Event()
        self._join_seconds = join_seconds
        self._threads = [threading.Thread(target=self.loop, args=(n,)) for n in range(count)]

    @abstractmethod
    def loop(self, index: int, /) -> None: ...

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=self._join_seconds)


# Rate limits far above what a test sends, for a server whose test is not about them.
RATES_NO_TEST_MEETS = {
    "DEALBASE_RATE_LIMIT_KEY": "100000/s",
    "DEALBASE_RATE_LIMIT_KEY_BURST": "1000000",
    "DEALBASE_RATE_LIMIT_TENANT": "100000/s",
    "DEALBASE_RATE_LIMIT_TENANT_BURST": "1000000",
}


@contextmanager
def dealbase_served(
    directory: Path, database_url: str, settings: dict[str, str], *options: str
) -> Iterator[ServeProcess]:
    """``dealbase_serve`` on ``database_url``, logging warnings and worse unless ``settings``
    say otherwise; handed over once it answers ``GET /healthz``."""
    environment = {
        "DEALBASE_DATABASE_URL": database_url,
        "DEALBASE_LOG_LEVEL": "warning",
        **settings,
    }
    with dealbase_serve(directory, environment, *options) as server:
        wait_until_served(
            server.process, f"{server.base_url}/healthz", server.output, SERVER_START_TIMEOUT_S
        )
        yield server


@contextmanager
def writes_raise(
    database_url: str, schema: str, table: str, sqlstate: str, statement: str = "INSERT"
) -> Iterator[str]:
    """Every ``statement`` (INSERT, UPDATE) of a row of ``schema.table`` fails with ``sqlstate``
    while the block runs, as a database in a state that refuses it would; yields the message
    the database gives."""
    message = f"{table} refuse writes now ({uuid.uuid4().hex[:8]})"
    function = f'"{schema}".refuse_writes'
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS"
            f" $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{sqlstate}'; END $$"
        )
        connection.execute(
            f'CREATE TRIGGER refuse_writes BEFORE {statement} ON "{schema}"."{table}"'
            f" FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
        try:
            yield message
        finally:
            connection.execute(f'DROP TRIGGER refuse_writes ON "{schema}"."{table}"')
            connection.execute(f"DROP FUNCTION {function}()")


@contextmanager
def logs_of(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> Iterator[list[Any]]:
    """What the ``log`` of each module logs while the block runs, as ``capture_logs`` gives it.
    Each module gets a logger made inside the capture: its own may have bound itself to the
    configuration before, on its first use by an earlier test of this process (the service
    caches loggers on first use)."""
    with capture_logs() as logs:
        for module in modules:
            monkeypatch.setattr(module, "log", structlog.get_logger(module.__name__))
        yield logs
