"""The Citus tier: tests run against a real Citus cluster (a coordinator and two workers) at
DEALBASE_TEST_CITUS_URL, every tenant a distributed schema (DEALBASE_CITUS_SCHEMA_SHARDING).
The REST and GraphQL walks run again through the pgbouncer in transaction mode in front of the
coordinator at DEALBASE_TEST_CITUS_PGBOUNCER_URL.

.ci/run builds Citus and starts the cluster (../shared/citus/) and that pgbouncer; under
CI=true a missing cluster or pgbouncer fails these tests, elsewhere they are skipped with the
commands that make one."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.db.proxy import through_a_proxy
from dealbase.migrations.runner import upgrade_control
from dealbase.tenancy.registry.placement import Node
from tests.ops.conftest import CliRun, RunCli, invoke_cli
from tests.support import (
    IN_CI,
    RATES_NO_TEST_MEETS,
    TenantWorld,
    build_tenant,
    database_on,
    dealbase_served,
    tenant_roles_of,
)
from tests.worker.conftest import receiver
from tests.worker.test_worker_cli import start_worker

# The webhook receiver on the loopback, for the tier's webhook walks.
__all__ = ["receiver"]

CITUS_SCRIPTS = Path(__file__).resolve().parents[3] / "shared" / "citus"
_MAKE_ONE = (
    f"build and start one with {CITUS_SCRIPTS}/build.sh and {CITUS_SCRIPTS}/cluster.sh start,"
    " then set DEALBASE_TEST_CITUS_URL to the URL the second prints"
)
_MAKE_A_PGBOUNCER = (
    "start one in front of the coordinator with PGBOUNCER_DIR=/tmp/dealbase-pgbouncer-citus"
    " PGBOUNCER_PORT=6440 PGBOUNCER_SERVER_PORT=9700 PGBOUNCER_DATABASE=dealbase"
    " .ci/start-pgbouncer, then set DEALBASE_TEST_CITUS_PGBOUNCER_URL to the URL it prints"
)


@pytest.fixture(scope="session")
def citus_url() -> str:
    """The coordinator's URL; its database has the citus extension and two workers."""
    url = os.environ.get("DEALBASE_TEST_CITUS_URL")
    if not url:
        if IN_CI:
            raise RuntimeError(f"CI=true but DEALBASE_TEST_CITUS_URL is not set: {_MAKE_ONE}")
        pytest.skip(f"no Citus cluster: {_MAKE_ONE}")
    with psycopg.connect(url, connect_timeout=5) as connection:
        workers = connection.execute(
            "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0"
        ).fetchone()
    assert workers is not None and workers[0] >= 1, f"{url}: a Citus coordinator with no worker"
    return url


def _server_and_database(url: str) -> tuple[object, ...]:
    """Which PostgreSQL cluster (its system identifier) and database ``url`` reaches."""
    with psycopg.connect(url, connect_timeout=5) as connection:
        row = connection.execute(
            "SELECT system_identifier, current_database() FROM pg_control_system()"
        ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.fixture(scope="session")
def citus_pgbouncer_url(citus_url: str) -> str:
    """The coordinator's database through a pgbouncer in transaction mode."""
    url = os.environ.get("DEALBASE_TEST_CITUS_PGBOUNCER_URL")
    if not url:
        if IN_CI:
            raise RuntimeError(
                f"CI=true but DEALBASE_TEST_CITUS_PGBOUNCER_URL is not set: {_MAKE_A_PGBOUNCER}"
            )
        pytest.skip(f"no pgbouncer in front of the Citus coordinator: {_MAKE_A_PGBOUNCER}")
    assert through_a_proxy(url), f"{url}: reaches PostgreSQL directly, not through pgbouncer"
    assert _server_and_database(url) == _server_and_database(citus_url), (
        f"{url}: not the database of the coordinator at {citus_url}"
    )
    return url


@contextmanager
def own_cluster_database(citus_url: str) -> Iterator[str]:
    """A Citus database of its own on the cluster (created on every node, with the extension,
    the coordinator named and the workers added), dropped afterwards with its tenant roles. A
    shard move or a rebalance in it moves nothing of another database's, so the tests that
    make them need not run alone."""
    name = f"dealbase_test_citus_{secrets.token_hex(4)}"
    with psycopg.connect(citus_url) as connection:
        coordinator = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0"
        ).fetchone()
        workers = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node"
            " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
        ).fetchall()
    assert coordinator is not None, f"{citus_url}: no coordinator in pg_dist_node"
    nodes = [database_on(citus_url, host, port) for host, port in [coordinator, *workers]]
    for node in nodes:
        with psycopg.connect(node, autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with psycopg.connect(database_on(node, database=name), autocommit=True) as connection:
            connection.execute("CREATE EXTENSION citus")
    url = database_on(nodes[0], database=name)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT citus_set_coordinator_host(%s, %s)", coordinator)
        for worker in workers:
            connection.execute("SELECT citus_add_node(%s, %s)", worker)
    try:
        yield url
    finally:
        roles = tenant_roles_of(url)
        for node in nodes:
            with psycopg.connect(node, autocommit=True) as connection:
                connection.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
                # Citus made each tenant role on every node; the database's objects are gone.
                for role in roles:
                    connection.execute(
                        sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role))
                    )


@pytest.fixture
def run_on_cluster(citus_url: str, tmp_path: Path) -> RunCli:
    """``dealbase`` on the cluster, tenants as distributed schemas."""

    def run(*args: str) -> CliRun:
        return invoke_cli(
            args,
            {
                "DEALBASE_DATABASE_URL": citus_url,
                "DEALBASE_CITUS_SCHEMA_SHARDING": "true",
                "DEALBASE_DATA_DIR": str(tmp_path / "cli-data"),
                "DEALBASE_LOG_LEVEL": "warning",
                "DEALBASE_REDIS_URL": None,
            },
        )

    return run


@contextmanager
def served_on_cluster(citus_url: str, directory: Path) -> Iterator[str]:
    """``dealbase serve`` on the cluster, tenants as distributed schemas, allowed to deliver to
    the loopback, its limits far above what the tests send; its base URL once it answers."""
    settings = {
        "DEALBASE_CITUS_SCHEMA_SHARDING": "true",
        "DEALBASE_WEBHOOKS_ALLOW_PRIVATE": "true",
        **RATES_NO_TEST_MEETS,
    }
    with dealbase_served(directory, citus_url, settings) as server:
        yield server.base_url


@contextmanager
def migrated_cluster_database(citus_url: str) -> Iterator[Database]:
    """The cluster's database at ``citus_url``, its control schema at head."""
    database = Database(citus_url, pool_size=4, distributed_schemas=True)
    with database.control() as connection:
        upgrade_control(connection, distributed=True)
    try:
        yield database
    finally:
        database.dispose()


@pytest.fixture(scope="session")
def cluster_database(citus_url: str) -> Iterator[Database]:
    """The cluster's database, its control schema at head; tests make their own tenants."""
    with migrated_cluster_database(citus_url) as database:
        yield database


@pytest.fixture(scope="session")
def cluster_settings(citus_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        database_url=citus_url,
        citus_schema_sharding=True,
        data_dir=tmp_path_factory.mktemp("cluster-data"),
        log_level="warning",
        webhooks_allow_private=True,
        # Limits far above what the tests send.
        rate_limit_key="100000/s",
        rate_limit_key_burst=1_000_000,
        rate_limit_tenant="100000/s",
        rate_limit_tenant_burst=1_000_000,
    )


@pytest.fixture(scope="session")
def cluster_client(cluster_database: Database, cluster_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(cluster_settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="session")
def cluster_bounced_client(
    cluster_database: Database,
    cluster_settings: Settings,
    citus_pgbouncer_url: str,
    citus_url: str,
) -> Iterator[TestClient]:
    """The cluster's app through the pgbouncer in front of the coordinator, told so; its LISTEN
    for key changes on a direct connection, as in production behind pgbouncer."""
    settings = cluster_settings.model_copy(
        update={
            "database_url": citus_pgbouncer_url,
            "database_listen_url": citus_url,
            "db_pgbouncer": True,
        }
    )
    assert settings.citus_schema_sharding
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="session")
def cluster_reads_on_workers_client(
    cluster_database: Database, cluster_settings: Settings
) -> Iterator[TestClient]:
    """The cluster's app serving its reads on the tenants' workers (CITUS_READS_ON_WORKERS)."""
    settings = cluster_settings.model_copy(update={"citus_reads_on_workers": True})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


_CLUSTER_CLIENTS = {
    "direct": "cluster_client",
    "through-pgbouncer": "cluster_bounced_client",
    "reads-on-workers": "cluster_reads_on_workers_client",
}


@pytest.fixture(params=list(_CLUSTER_CLIENTS))
def cluster_client_either_way(request: pytest.FixtureRequest) -> TestClient:
    """The cluster's app reached directly, through pgbouncer in transaction mode, and directly
    with its reads on the tenants' workers: a test taking it runs once each way, and must pass
    the same every time."""
    client: TestClient = request.getfixturevalue(_CLUSTER_CLIENTS[request.param])
    return client


@pytest.fixture
def cluster_world(cluster_database: Database) -> TenantWorld:
    """A fresh tenant of the cluster (a distributed schema) with one department and its key."""
    return build_tenant(cluster_database, distributed=True)


def cluster_rows(citus_url: str, query: str) -> list[tuple[Any, ...]]:
    """The rows of one query, on a connection of its own to the coordinator."""
    with psycopg.connect(citus_url) as connection:
        return connection.execute(query).fetchall()


def deliveries_by_state(citus_url: str, schema: str) -> Counter[str]:
    """How many of the schema's webhook deliveries are in each state."""
    rows = cluster_rows(
        citus_url, f'SELECT state, count(*) FROM "{schema}".webhook_deliveries GROUP BY state'
    )
    return Counter(dict(rows))


def add_ordered_endpoint(
    http: httpx.Client, world: TenantWorld, url: str, events: list[str]
) -> None:
    """An ordered webhook endpoint of the world's department, sending ``events`` to ``url``."""
    endpoint = http.post(
        "/api/v1/integration/webhooks",
        json={"url": url, "events": events, "ordered": True},
        headers=world.key.headers,
    )
    assert endpoint.status_code == 201, endpoint.text


@dataclass(frozen=True)
class ClusterWorker:
    """A ``dealbase worker`` process on the cluster, its output in ``log``."""

    citus_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def wait_until_delivered(
        self, schema: str, count: int, deadline: float, detail: Callable[[], str] = lambda: ""
    ) -> None:
        """Returns once the schema's deliveries are ``count``, each recorded as delivered: a
        delivery sent twice is sent again before its record, so then the worker has sent all
        it ever will. Fails, with ``detail()`` and the worker's output, if the worker exits or
        ``deadline`` (on ``time.monotonic``) passes first."""
        expected = Counter(delivered=count)
        while (states := deliveries_by_state(self.citus_url, schema)) != expected:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, (
                f"{schema} {states}, {count} expected: {detail()}; {self.log.read_text()[-3000:]}"
            )
            time.sleep(0.1)


@contextmanager
def worker_on_cluster(citus_url: str, directory: Path) -> Iterator[ClusterWorker]:
    """``dealbase worker`` on the cluster, tenants as distributed schemas, until the block ends
    (stopping it lets the visits under way finish)."""
    process, log = start_worker(citus_url, directory, DEALBASE_CITUS_SCHEMA_SHARDING="true")
    try:
        yield ClusterWorker(citus_url, process, log)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def workers(citus_url: str) -> list[Node]:
    """The cluster's workers, by port."""
    rows = cluster_rows(
        citus_url,
        "SELECT nodename, nodeport FROM pg_dist_node"
        " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport",
    )
    return [Node(host, port) for host, port in rows]


def wakeups(citus_url: str, schema: str) -> int:
    """How many webhook wakeups of the schema wait in ``control``."""
    with psycopg.connect(citus_url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM control.webhook_wakeups WHERE schema_name = %s", [schema]
        ).fetchone()
    assert row is not None
    return int(row[0])


def forget_wakeups(citus_url: str, schema: str) -> None:
    """Removes the schema's wakeups: no webhook worker serves the shared cluster's test tenants,
    and one left behind would be another test's to find."""
    with psycopg.connect(citus_url) as connection:
        connection.execute("DELETE FROM control.webhook_wakeups WHERE schema_name = %s", [schema])
