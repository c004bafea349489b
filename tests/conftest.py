from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database, DatabaseLimits
from tests.support import (
    THROUGH_PGBOUNCER,
    TenantWorld,
    build_tenant,
    migrated_scratch_database,
    server_url,
    through_pgbouncer,
)

# Where the embedded PostgreSQL lives when no server is named: one cluster for every pytest
# process of every run (the parallel workers share it, each on a database of its own), so initdb
# runs once per clone rather than once per worker and per run.
EMBEDDED_POSTGRES_DIR = Path(__file__).resolve().parents[1] / ".dealbase" / "tests"


# The serial pass runs as two processes side by side (Makefile): the tests on the Citus cluster
# and the others. They share no PostgreSQL server, so each still has its servers alone.
SERIAL_TIERS = {"citus": True, "server": False}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial-tier",
        choices=sorted(SERIAL_TIERS),
        help="run only the tests on the Citus cluster (citus) or only the others (server)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.getoption("--serial-tier")
    if tier is None:
        return
    on_citus = SERIAL_TIERS[tier]
    kept = [item for item in items if _on_citus(item) == on_citus]
    deselected = [item for item in items if _on_citus(item) != on_citus]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _on_citus(item: pytest.Item) -> bool:
    return isinstance(item, pytest.Function) and "citus_url" in item.fixturenames


@pytest.fixture(scope="session")
def postgres_server() -> str:
    return server_url(EMBEDDED_POSTGRES_DIR)


@pytest.fixture(scope="session")
def database_url(postgres_server: str) -> Iterator[str]:
    """A database for the session, its control schema at head; tests make their own tenants."""
    with migrated_scratch_database(postgres_server, "session") as url:
        yield url


# How long the tests' own set-up and checks may wait on PostgreSQL: the service's 3 s for a
# lock and 15 s for a statement judged the machine (tenants made at once in four processes wait
# on each other's role grants, past 3 s on a busy machine), and so did its 3 s for a pooled
# connection (four threads' batches at once, beside two busy loops, while the pool opened its
# connections). The tests of those bounds set theirs.
PATIENT = DatabaseLimits(
    statement_timeout_ms=600_000, lock_timeout_ms=120_000, acquire_timeout_seconds=60.0
)


@pytest.fixture(scope="session")
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url, pool_size=4, limits=PATIENT)
    yield db
    db.dispose()


@pytest.fixture(scope="session")
def settings(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    # The LISTEN for key changes needs a direct connection, as in production behind pgbouncer.
    through: dict[str, object] = (
        {
            "database_url": through_pgbouncer(database_url),
            "database_listen_url": database_url,
            "db_pgbouncer": True,
        }
        if THROUGH_PGBOUNCER
        else {"database_url": database_url}
    )
    # Limits far above what tests send: the rate-limit tests build apps with limits of their own.
    # A request waits for a database connection as long as the settings allow, not the default
    # 3 s: requests queued on a small pool waited longer on a busy machine and were answered
    # 503 (the isolation fuzz, a dozen on one connection); for locks and statements as the
    # tests' own connections do. The tests of those bounds set their own.
    return Settings(
        **through,  # type: ignore[arg-type]
        data_dir=tmp_path_factory.mktemp("data"),
        log_level="warning",
        db_acquire_timeout_ms=round(PATIENT.acquire_timeout_seconds * 1000),
        db_lock_timeout_ms=PATIENT.lock_timeout_ms,
        db_statement_timeout_ms=PATIENT.statement_timeout_ms,
        rate_limit_key="100000/s",
        rate_limit_key_burst=1_000_000,
        rate_limit_tenant="100000/s",
        rate_limit_tenant_burst=1_000_000,
        rate_limit_auth_failures="100000/s",
        rate_limit_auth_failures_burst=1_000_000,
    )


@pytest.fixture(scope="session")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def make_tenant(database: Database) -> Callable[..., TenantWorld]:
    def make(departments: int = 1) -> TenantWorld:
        return build_tenant(database, departments=departments)

    return make


@pytest.fixture
def world(make_tenant: Callable[..., TenantWorld]) -> TenantWorld:
    """A fresh tenant with one department and its key."""
    return make_tenant()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
