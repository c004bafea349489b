"""What a pooled connection's tenants cost the workers: Citus opens a coordinator session's
connections to a worker as the statement's role, the tenant's, and keeps one for every role the
session has worked as. The pool's limit of tenants a connection (``tenants_per_connection``,
``Settings.tenants_per_connection``) therefore bounds the connections each of its sessions holds
to a worker."""

from __future__ import annotations

import secrets

import psycopg
import pytest
from sqlalchemy import func, literal_column, select

from dealbase.config import TENANTS_PER_CONNECTION_ON_A_CLUSTER, Settings
from dealbase.db.database import Database
from dealbase.platform.tables import customers
from dealbase.tenancy.registry.placement import Node
from dealbase.tenancy.registry.tenants import Tenant, create_tenant
from tests.citus.conftest import workers

LIMIT = 2
TENANTS = 5


def _held(citus_url: str, workers: list[Node], session: int) -> int:
    """The connections the coordinator session of global pid ``session`` holds to the workers,
    counted on the workers, the most on any one."""
    database = citus_url.rsplit("/", 1)[1]
    most = 0
    for worker in workers:
        with psycopg.connect(
            f"postgresql://postgres@{worker.host}:{worker.port}/{database}"
        ) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (f"citus_internal gpid={session}",),
            ).fetchone()
        assert row is not None
        most = max(most, int(row[0]))
    return most


def _read_in_each(
    database: Database, tenants: list[Tenant], citus_url: str, workers: list[Node]
) -> list[int]:
    """Reads a table of each tenant in turn on the pool's one connection; after each, the
    connections to a worker that connection's coordinator session holds."""
    held = []
    for tenant in tenants:
        with database.unit_of_work(tenant.scope) as uow:
            session, _ = uow.connection.execute(
                select(literal_column("citus_backend_gpid()"), func.count()).select_from(customers)
            ).one()
        held.append(_held(citus_url, workers, int(session)))
    return held


@pytest.fixture(scope="module")
def tenants(citus_url: str) -> list[Tenant]:
    database = Database(citus_url, pool_size=1, distributed_schemas=True)
    try:
        run = secrets.token_hex(4)
        made = [
            create_tenant(database, f"connections-{run}-{n}", distributed=True)
            for n in range(TENANTS)
        ]
    finally:
        database.dispose()
    return made


def test_a_coordinator_session_holds_a_worker_connection_for_each_tenant_it_worked_in(
    citus_url: str, tenants: list[Tenant]
) -> None:
    """Without a limit, the session's worker connections grow with its tenants: the reason for
    the limit (and the measure the next test takes)."""
    nodes = workers(citus_url)
    database = Database(citus_url, pool_size=1, max_overflow=0, distributed_schemas=True)
    try:
        held = _read_in_each(database, tenants, citus_url, nodes)
    finally:
        database.dispose()
    assert max(held) > LIMIT, held


def test_the_pools_limit_of_tenants_bounds_the_worker_connections_a_session_holds(
    citus_url: str, tenants: list[Tenant]
) -> None:
    nodes = workers(citus_url)
    database = Database(
        citus_url,
        pool_size=1,
        max_overflow=0,
        distributed_schemas=True,
        tenants_per_connection=LIMIT,
    )
    try:
        held = _read_in_each(database, tenants, citus_url, nodes)
    finally:
        database.dispose()
    assert max(held) <= LIMIT, held


def test_a_cluster_defaults_to_fewer_tenants_a_connection_than_one_server() -> None:
    one_server = Settings(database_url="postgresql://localhost/x")
    cluster = Settings(database_url="postgresql://localhost/x", citus_schema_sharding=True)
    assert cluster.tenants_per_connection() == TENANTS_PER_CONNECTION_ON_A_CLUSTER
    assert one_server.tenants_per_connection() > cluster.tenants_per_connection()
    chosen = Settings(
        database_url="postgresql://localhost/x",
        citus_schema_sharding=True,
        db_tenants_per_connection=40,
    )
    assert chosen.tenants_per_connection() == 40
