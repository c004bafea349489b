"""Tenants moved between the workers of a Citus cluster while they work: ``dealbase tenant
move`` under a steady write load and webhook deliveries, and ``dealbase tenant rebalance``
spreading twenty tenants over the workers. The module works in a Citus database of its own, so
its moves and its rebalance touch no other test's tenants. It still runs in the serial pass:
making twenty distributed schemas keeps the three nodes busy, and beside the parallel pass the
rebalance took more than twice as long and slowed every other test with it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from dealbase.db.database import Database
from dealbase.tenancy.registry.placement import tenant_node
from dealbase.tenancy.registry.tenants import create_tenant
from tests.citus.conftest import (
    add_ordered_endpoint,
    cluster_rows,
    migrated_cluster_database,
    own_cluster_database,
    served_on_cluster,
    worker_on_cluster,
    workers,
)
from tests.ops.conftest import RunCli
from tests.support import TenantWorld, ThreadsUntilStopped
from tests.worker.conftest import Receiver

pytestmark = pytest.mark.serial

API = "/api/v1/integration"
WRITERS = 4
# Customers the writers create before the move begins, and again after it has ended.
WRITES_AROUND_THE_MOVE = 20
# Failure bounds: only a stuck server, worker or move comes near them. (Delivering the ~360
# customers one after another, as the endpoint is ordered, took 30 s beside two busy loops.)
WRITTEN_WITHIN_S = 60.0
DELIVERED_WITHIN_S = 300.0
REBALANCER_PACE = {
    "citus.background_task_queue_interval": "100ms",
    "citus.max_background_task_executors_per_node": "4",
}


@pytest.fixture(scope="module")
def citus_url(citus_url: str) -> Iterator[str]:
    """This module's own database on the cluster (the tests' fixtures all reach it by this
    name)."""
    with own_cluster_database(citus_url) as url:
        yield url


@pytest.fixture(scope="module")
def cluster_database(citus_url: str) -> Iterator[Database]:
    with migrated_cluster_database(citus_url) as database:
        yield database


class Writers(ThreadsUntilStopped):
    """``WRITERS`` clients creating customers one after another until stopped; every answer
    kept."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        super().__init__(WRITERS, join_seconds=60)
        self.base_url = base_url
        self.headers = headers
        self.created: list[str] = []
        self.refused: list[httpx.Response] = []
        self.unexpected: list[str] = []
        self.lock = threading.Lock()

    def loop(self, index: int) -> None:
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=30) as client:
            count = 0
            while not self.stopping.is_set():
                count += 1
                response = client.post(f"{API}/customers", json={"last_name": f"w{index}-{count}"})
                with self.lock:
                    if response.status_code == 201:
                        self.created.append(response.json()["id"])
                    elif response.status_code == 503 and response.headers.get("retry-after"):
                        self.refused.append(response)
                    else:
                        self.unexpected.append(f"{response.status_code} {response.text}")

    def wait_until_created(self, count: int) -> None:
        """Returns once ``count`` customers are created; fails after WRITTEN_WITHIN_S."""
        deadline = time.monotonic() + WRITTEN_WITHIN_S
        while len(self.created) < count:
            assert not self.unexpected, self.unexpected
            assert time.monotonic() < deadline, f"{len(self.created)} of {count} created"
            time.sleep(0.01)


@pytest.fixture
def served_cluster(citus_url: str, tmp_path: Path) -> Iterator[str]:
    with served_on_cluster(citus_url, tmp_path / "server") as base_url:
        yield base_url


def test_a_tenant_moved_while_it_works_loses_no_write_and_sends_no_delivery_twice(
    citus_url: str,
    cluster_world: TenantWorld,
    served_cluster: str,
    run_on_cluster: RunCli,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    with httpx.Client(base_url=served_cluster) as http:
        add_ordered_endpoint(http, cluster_world, receiver.url, ["customer.created"])
    schema = cluster_world.tenant.schema
    source = tenant_node(citus_url, schema)
    (target,) = [node for node in workers(citus_url) if node != source]
    with worker_on_cluster(citus_url, tmp_path) as worker:
        with Writers(served_cluster, cluster_world.key.headers) as writers:
            # Writing as the move begins, and still once it has ended.
            writers.wait_until_created(WRITES_AROUND_THE_MOVE)
            moved = run_on_cluster(
                "tenant", "move", str(cluster_world.tenant.id), "--node", str(target), "--json"
            )
            writers.wait_until_created(len(writers.created) + WRITES_AROUND_THE_MOVE)
        assert moved.exit_code == 0, str(moved)
        assert moved.json()["from"] == str(source)
        # One whose attempt was forgotten in the move is sent again before its record.
        worker.wait_until_delivered(
            schema, len(writers.created), time.monotonic() + DELIVERED_WITHIN_S
        )

    assert tenant_node(citus_url, schema) == target
    assert writers.unexpected == []
    assert len(writers.created) > 20, "the writers hardly wrote"
    stored = cluster_rows(citus_url, f'SELECT id::text FROM "{schema}".customers')
    assert sorted(id_ for (id_,) in stored) == sorted(writers.created)
    delivered = Counter(json.loads(request.body)["data"]["id"] for request in receiver.requests)
    assert delivered == Counter(writers.created), "a delivery lost or sent twice"


# Enough for a rebalance to move several and be judged by its spread; each costs the nodes its
# DDL's round trips.
NEW_TENANTS = 20


def _schemas_per_worker(citus_url: str) -> Counter[int]:
    rows = cluster_rows(
        citus_url,
        "SELECT s.nodeport, count(DISTINCT c.colocation_id) FROM citus_schemas c"
        " JOIN citus_shards s ON s.colocation_id = c.colocation_id GROUP BY s.nodeport",
    )
    return Counter(dict(rows))


def test_rebalance_spreads_twenty_new_tenants_over_the_workers(
    citus_url: str, cluster_database: Database, run_on_cluster: RunCli
) -> None:
    first, *others = workers(citus_url)
    before = _schemas_per_worker(citus_url)
    with psycopg.connect(citus_url, autocommit=True) as connection:
        # New schemas go to the first worker only.
        for node in others:
            connection.execute(
                "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', false)",
                (node.host, node.port),
            )
        try:
            # Four at a time: most of a creation is its DDL's round trips to the nodes.
            with ThreadPoolExecutor(max_workers=4) as pool:
                tenants = list(
                    pool.map(
                        lambda n: create_tenant(
                            cluster_database, f"spread-{uuid.uuid4().hex[:8]}-{n}", distributed=True
                        ),
                        range(NEW_TENANTS),
                    )
                )
        finally:
            for node in others:
                connection.execute(
                    "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', true)",
                    (node.host, node.port),
                )
        assert {tenant_node(citus_url, tenant.schema) for tenant in tenants} == {first}
        assert _schemas_per_worker(citus_url)[first.port] == before[first.port] + NEW_TENANTS
        try:
            # The background rebalancer looks for its next task every 5 s and moves one tenant
            # a node at a time by default, which would make the moves a minute long. Set for
            # the rebalance only, and reset whatever happens: the settings are the server's.
            for setting, value in REBALANCER_PACE.items():
                connection.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
            connection.execute("SELECT pg_reload_conf()")
            # Writes wait while their tenant moves (no load here; a move under load: above).
            rebalanced = run_on_cluster("tenant", "rebalance", "--mode", "block_writes", "--json")
        finally:
            for setting in REBALANCER_PACE:
                connection.execute(f"ALTER SYSTEM RESET {setting}")
            connection.execute("SELECT pg_reload_conf()")

    assert rebalanced.exit_code == 0, str(rebalanced)
    assert rebalanced.json()["moves"] >= 1
    # Even within Citus's default threshold, no worker more than 10 % above the average: the
    # rebalancer may have moved older tenants rather than these.
    per_worker = _schemas_per_worker(citus_url)
    average = sum(per_worker.values()) / len(per_worker)
    assert max(per_worker.values()) <= average * 1.1 + 1, per_worker
