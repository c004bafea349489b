"""Reads served by the worker holding the tenant's schema (DEALBASE_CITUS_READS_ON_WORKERS):
REST lists and the GraphQL dashboard answer exactly as through the coordinator, on a connection
to that worker; a moved tenant is read right at once on the node it left and, once its
placement is looked up again, on its new one; a schema that is not distributed is read on the
coordinator; a worker that cannot be reached fails its tenants' reads (503) and nothing else.
(The REST and GraphQL walks run with the setting on too: ``cluster_client_either_way``.)"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database, application_name
from dealbase.db.worker_reads import PLACEMENT_SECONDS, Placements, WorkerNode
from dealbase.ops import admin
from dealbase.tenancy.registry.placement import Node, move_tenant, tenant_node
from tests.citus.conftest import workers
from tests.support import TenantWorld, build_tenant, database_on

API = "/api/v1/integration"
DASHBOARD = (
    Path(__file__).resolve().parents[2] / "bench" / "queries" / "dashboard.graphql"
).read_text()


class Clock:
    """The app's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def reading_client(
    cluster_database: Database, cluster_settings: Settings, clock: Clock
) -> Iterator[TestClient]:
    """The cluster's app with its reads on the workers, its clock the test's."""
    settings = cluster_settings.model_copy(update={"citus_reads_on_workers": True})
    with TestClient(create_app(settings, clock=clock), raise_server_exceptions=False) as client:
        yield client


def _database_of(client: TestClient) -> Database:
    database: Database = client.app.state.database  # type: ignore[attr-defined]
    return database


def _seeded(client: TestClient, world: TenantWorld) -> None:
    """Customers, and deals with customers moved to the second step."""
    headers = world.key.headers
    steps = client.get(f"{API}/steps", headers=headers).json()["data"]
    for index in range(3):
        created = client.post(
            f"{API}/customers",
            json={"last_name": f"Customer {index}", "city": "Berlin"},
            headers=headers,
        )
        assert created.status_code == 201, created.text
        deal = client.post(
            f"{API}/deals",
            json={
                "name": f"Deal {index}",
                "volume": 100 * index,
                "customers": [{"last_name": f"Buyer {index}"}],
            },
            headers=headers,
        )
        assert deal.status_code == 201, deal.text
        moved = client.patch(
            f"{API}/deals/{deal.json()['id']}", json={"step_id": steps[1]["id"]}, headers=headers
        )
        assert moved.status_code == 200, moved.text


def _seeded_on_its_worker(client: TestClient, world: TenantWorld, citus_url: str) -> Node:
    """Seeds the tenant (``_seeded``); the worker that holds it."""
    _seeded(client, world)
    node = tenant_node(citus_url, world.tenant.schema)
    assert node is not None
    return node


def _answers(client: TestClient, world: TenantWorld) -> tuple[str, str, Any]:
    """A REST list, a REST read of one row, and the GraphQL dashboard, as the tenant's key."""
    headers = world.key.headers
    listed = client.get(f"{API}/customers", headers=headers)
    assert listed.status_code == 200, listed.text
    first_deal = client.get(f"{API}/deals", params={"limit": "1"}, headers=headers)
    assert first_deal.status_code == 200, first_deal.text
    dashboard = client.post(
        "/graphql", json={"query": DASHBOARD, "variables": {"first": 50}}, headers=headers
    )
    assert dashboard.status_code == 200 and "errors" not in dashboard.json(), dashboard.text
    return listed.text, first_deal.text, dashboard.json()


def _reads_on(database: Database) -> dict[WorkerNode, int]:
    """How many connections each worker's pool has handed out so far."""
    assert database.worker_reads is not None
    return {node: pool.stats().requests for node, pool in database.worker_reads.pools.items()}


def _served_by_this_process(node_url: str, schema: str) -> int:
    """This process's connections to the node whose last statement read ``schema``."""
    with psycopg.connect(node_url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s",
            (application_name(os.getpid()), f"%{schema}%"),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_reads_on_the_tenants_worker_answer_as_through_the_coordinator(
    cluster_client: TestClient,
    reading_client: TestClient,
    cluster_world: TenantWorld,
    citus_url: str,
) -> None:
    node = _seeded_on_its_worker(cluster_client, cluster_world, citus_url)
    database = _database_of(reading_client)
    before = _reads_on(database).get(WorkerNode(node.host, node.port), 0)
    coordinator_before = database.async_pool.stats().requests

    on_the_worker = _answers(reading_client, cluster_world)

    assert on_the_worker == _answers(cluster_client, cluster_world)
    # Three reads (the dashboard's page and loaders share one transaction) on the worker's pool;
    # the coordinator's only for the one lookup of where the schema lives.
    assert _reads_on(database)[WorkerNode(node.host, node.port)] == before + 3
    assert database.async_pool.stats().requests == coordinator_before + 1
    _answers(reading_client, cluster_world)
    assert _reads_on(database)[WorkerNode(node.host, node.port)] == before + 6
    assert database.async_pool.stats().requests == coordinator_before + 1
    assert (
        _served_by_this_process(
            database_on(citus_url, node.host, node.port, database="dealbase"),
            cluster_world.tenant.schema,
        )
        >= 1
    )


def test_a_moved_tenant_is_read_right_at_once_and_on_its_new_worker_once_looked_up_again(
    cluster_client: TestClient,
    reading_client: TestClient,
    cluster_world: TenantWorld,
    citus_url: str,
    clock: Clock,
) -> None:
    source = _seeded_on_its_worker(cluster_client, cluster_world, citus_url)
    others = [node for node in workers(citus_url) if node != source]
    assert others, "a cluster of one worker: nowhere to move the tenant"
    target = others[0]
    database = _database_of(reading_client)
    expected = _answers(reading_client, cluster_world)

    assert move_tenant(citus_url, cluster_world.tenant.schema, target, "block_writes") == source
    counts = _reads_on(database)
    # At once: on the node it left, which routes the reads to its new one.
    assert _answers(reading_client, cluster_world) == expected
    after_the_move = _reads_on(database)
    assert (
        after_the_move[WorkerNode(source.host, source.port)]
        == counts[WorkerNode(source.host, source.port)] + 3
    )
    # Once the placement is no longer believed: on the new node.
    clock.now += PLACEMENT_SECONDS
    assert _answers(reading_client, cluster_world) == expected
    moved = _reads_on(database)
    assert (
        moved.get(WorkerNode(target.host, target.port), 0)
        == after_the_move.get(WorkerNode(target.host, target.port), 0) + 3
    )
    assert (
        moved[WorkerNode(source.host, source.port)]
        == after_the_move[WorkerNode(source.host, source.port)]
    )


def test_a_schema_not_distributed_is_read_on_the_coordinator(
    cluster_client: TestClient,
    reading_client: TestClient,
    cluster_database: Database,
    citus_url: str,
) -> None:
    # A tenant schema on a cluster is made distributed; an operator may turn one back into
    # the coordinator's own (its tables local there).
    world = build_tenant(cluster_database, distributed=True)
    try:
        _seeded(cluster_client, world)
        with psycopg.connect(citus_url, autocommit=True) as connection:
            connection.execute(
                "SELECT citus_schema_undistribute(%s::regnamespace)", (world.tenant.schema,)
            )
        database = _database_of(reading_client)
        before = _reads_on(database)
        coordinator_before = database.async_pool.stats().requests

        assert _answers(reading_client, world) == _answers(cluster_client, world)
        assert _reads_on(database) == before
        # The one lookup that found the schema on no worker, and the three reads.
        assert database.async_pool.stats().requests == coordinator_before + 4
    finally:
        admin.delete_tenant(cluster_database, world.tenant.id, distributed=True)


def _port_nobody_listens_on() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_worker_not_reached_fails_its_tenants_reads_only(
    cluster_database: Database,
    cluster_settings: Settings,
    citus_url: str,
) -> None:
    down, up = (build_tenant(cluster_database, distributed=True) for _ in range(2))
    unreachable = WorkerNode("127.0.0.1", _port_nobody_listens_on())
    settings = cluster_settings.model_copy(update={"citus_reads_on_workers": True})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        database = _database_of(client)
        assert database.worker_reads is not None
        real = database.worker_reads.placements

        async def look_up(schema: str) -> WorkerNode | None:
            if schema == down.tenant.schema:
                return unreachable
            return await real.node_of(schema)

        database.worker_reads.placements = Placements(look_up)
        read = client.get(f"{API}/customers", headers=down.key.headers)
        assert read.status_code == 503, read.text
        assert read.headers["content-type"].startswith("application/problem+json")
        dashboard = client.post(
            "/graphql",
            json={"query": DASHBOARD, "variables": {"first": 50}},
            headers=down.key.headers,
        )
        assert dashboard.json()["errors"][0]["extensions"]["code"] == "database_unavailable", (
            dashboard.text
        )
        # Its writes go to the coordinator; the other tenant's reads to their worker.
        written = client.post(
            f"{API}/customers", json={"last_name": "Still"}, headers=down.key.headers
        )
        assert written.status_code == 201, written.text
        assert client.get(f"{API}/customers", headers=up.key.headers).status_code == 200
