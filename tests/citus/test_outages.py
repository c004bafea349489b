"""A node of the Citus cluster lost and back while tenants work: a worker, then the
coordinator, stopped (fast, then immediate) and started again under four writers, two tenants
on each worker, each with an ordered webhook endpoint that ``dealbase worker`` delivers to.

Clients of the tenants the node holds are answered 503 with Retry-After while it is down (never
500) and write again once it is back; the other worker's tenants see no error at all; every
customer answered 201 is stored, and each stored customer is delivered once. The module
stops and starts the nodes of a cluster of its own. It runs in the serial pass: its three
nodes, server and worker under four writers keep the machine's cores busy."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import psycopg
import pytest

from dealbase.db.database import Database
from dealbase.tenancy.registry.placement import Node, tenant_node
from tests.citus.conftest import (
    add_ordered_endpoint,
    migrated_cluster_database,
    served_on_cluster,
    worker_on_cluster,
)
from tests.citus.outages import (
    Answer,
    OwnCluster,
    ShutdownMode,
    TenantWriters,
    own_cluster,
    tally,
    unexpected,
)
from tests.support import TenantWorld, build_tenant
from tests.worker.conftest import Receiver

pytestmark = pytest.mark.serial

TENANTS_PER_WORKER = 2
# Customers each writer has created before a node stops, while it is down (the writers whose
# tenants it does not hold) and once it is back.
WRITES_AROUND = 5
# 503s each writer whose tenant is on the stopped node is answered before it starts again: the
# outage seen more than once, not one request caught in a shutdown.
REFUSALS_WHILE_DOWN = 10
# Failure bounds only: a stuck server, worker or node comes near them, a busy machine does not.
WRITTEN_WITHIN_S = 60.0
BACK_WITHIN_S = 60.0
DELIVERED_WITHIN_S = 180.0


@pytest.fixture(scope="module")
def outage_cluster(citus_url: str) -> Iterator[OwnCluster]:
    """A cluster of the module's own (``citus_url``, the shared one, only proves that Citus is
    built here, or fails under CI)."""
    with own_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def outage_database(outage_cluster: OwnCluster) -> Iterator[Database]:
    with migrated_cluster_database(outage_cluster.url) as database:
        yield database


@pytest.fixture(scope="module")
def outage_server(
    outage_cluster: OwnCluster, outage_database: Database, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with served_on_cluster(outage_cluster.url, tmp_path_factory.mktemp("outage-server")) as url:
        yield url


def _tenants_on(cluster: OwnCluster, database: Database, worker: Node) -> list[TenantWorld]:
    """New tenants placed on ``worker``: the other worker takes no new schema meanwhile."""
    others = [node for node in cluster.workers if node != worker]
    with psycopg.connect(cluster.url, autocommit=True) as connection:
        for node in others:
            connection.execute(
                "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', false)",
                (node.host, node.port),
            )
        try:
            # At once: most of a creation is its DDL's round trips to the nodes.
            with ThreadPoolExecutor(max_workers=TENANTS_PER_WORKER) as pool:
                worlds = list(
                    pool.map(
                        lambda _: build_tenant(database, distributed=True),
                        range(TENANTS_PER_WORKER),
                    )
                )
        finally:
            for node in others:
                connection.execute(
                    "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', true)",
                    (node.host, node.port),
                )
    assert {tenant_node(cluster.url, world.tenant.schema) for world in worlds} == {worker}
    return worlds


@dataclass(frozen=True)
class Outage:
    """A node stopped and started again, on ``time.monotonic``."""

    node: Node
    mode: ShutdownMode
    # The writers whose tenants the node holds (all, for the coordinator).
    affected: frozenset[int]
    stopping_at: float
    stopped_at: float
    starting_at: float
    started_at: float
    # When every writer had written again since the start: the next outage may begin.
    ended_at: float

    def phase(self, answer: Answer) -> str:
        at = answer.answered_at
        if at < self.stopping_at:
            return "before"
        if at >= self.ended_at:
            return "after"
        if at < self.starting_at:
            return "down"
        if at < self.started_at:
            return "starting"
        return "back"

    def report(self, answers: list[Answer]) -> str:
        """What clients saw, by phase, and how long after the node accepted connections each
        affected writer was first answered 201 (for docs/scaling.md)."""
        ours = [a for a in answers if self.phase(a) not in ("before", "after")]
        lines = [
            f"{self.mode} stop of {self.node}: down {self.starting_at - self.stopped_at:.1f} s"
        ]
        for group, members in (("affected", self.affected), ("others", None)):
            counts: dict[str, Counter[int]] = {}
            for answer in ours:
                if (answer.writer in self.affected) == (members is not None):
                    counts.setdefault(self.phase(answer), Counter())[answer.status] += 1
            lines.append(f"  {group}: {dict(sorted(counts.items()))}")
        for writer in sorted(self.affected):
            back = [
                a.answered_at - self.started_at
                for a in ours
                if a.writer == writer and a.status == 201 and a.answered_at >= self.started_at
            ]
            lines.append(f"  writer {writer}: first 201 {min(back):.2f} s after the start")
        return "\n".join(lines)


def _stored(url: str, schema: str) -> dict[str, str]:
    """The schema's customers: their last names by id."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(f'SELECT id::text, last_name FROM "{schema}".customers')
        return dict(rows.fetchall())


def _without_event(url: str, schema: str) -> list[str]:
    """The last names of the schema's customers stored without their customer.created event:
    a create is one transaction, so none should be."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            f'SELECT c.last_name FROM "{schema}".customers c WHERE NOT EXISTS'
            f' (SELECT FROM "{schema}".events e'
            f" WHERE e.type = 'customer.created' AND e.data->>'id' = c.id::text)"
        ).fetchall()
    return [last_name for (last_name,) in rows]


def _undelivered(url: str, schema: str) -> str:
    """What the schema holds of its customers not delivered: for a failure's message."""
    with psycopg.connect(url) as connection:
        customers = connection.execute(
            f"SELECT c.last_name, e.id IS NOT NULL, e.position, e.sequence, e.created_at, d.state"
            f' FROM "{schema}".customers c LEFT JOIN "{schema}".events e'
            f" ON e.type = 'customer.created' AND e.data->>'id' = c.id::text"
            f' LEFT JOIN "{schema}".webhook_deliveries d ON d.event_id = e.id'
            " WHERE d.state IS DISTINCT FROM 'delivered'"
        ).fetchall()
        scanned = connection.execute(
            f'SELECT scanned_position FROM "{schema}".webhook_endpoints'
        ).fetchall()
        events = connection.execute(
            f"SELECT max(position), count(*) FILTER (WHERE position IS NULL), count(*)"
            f' FROM "{schema}".events'
        ).fetchall()
        wakeups = connection.execute(
            "SELECT due_at, claimed_by FROM control.webhook_wakeups WHERE schema_name = %s",
            [schema],
        ).fetchall()
    return f"customers {customers}; scanned {scanned}; events {events}; wakeups {wakeups}"


def _created_since(answers: list[Answer], writer: int, since: float) -> int:
    return sum(1 for a in answers if a.writer == writer and a.status == 201 and a.sent_at >= since)


def _refused_since(answers: list[Answer], writer: int, since: float) -> int:
    return sum(1 for a in answers if a.writer == writer and a.status == 503 and a.sent_at >= since)


def _outage(
    cluster: OwnCluster,
    writers: TenantWriters,
    node: Node,
    mode: ShutdownMode,
    affected: frozenset[int],
) -> Outage:
    everyone = range(len(writers.headers))
    since = time.monotonic()
    writers.wait_until(
        lambda answers: all(_created_since(answers, w, since) >= WRITES_AROUND for w in everyone),
        f"{WRITES_AROUND} customers by each writer before the stop",
        WRITTEN_WITHIN_S,
    )
    stopping_at = time.monotonic()
    cluster.stop(node, mode)
    stopped_at = time.monotonic()
    writers.wait_until(
        lambda answers: all(
            _refused_since(answers, w, stopped_at) >= REFUSALS_WHILE_DOWN
            if w in affected
            else _created_since(answers, w, stopped_at) >= WRITES_AROUND
            for w in everyone
        ),
        f"503s for the writers on {node}, customers for the others",
        WRITTEN_WITHIN_S,
    )
    starting_at = time.monotonic()
    cluster.start(node)
    started_at = time.monotonic()
    writers.wait_until(
        lambda answers: all(
            _created_since(answers, w, started_at) >= WRITES_AROUND for w in everyone
        ),
        f"{WRITES_AROUND} customers by each writer once {node} is back",
        BACK_WITHIN_S,
    )
    return Outage(
        node, mode, affected, stopping_at, stopped_at, starting_at, started_at, time.monotonic()
    )


def _through_outages(
    cluster: OwnCluster,
    database: Database,
    server: str,
    receiver: Receiver,
    directory: Path,
    outages: list[tuple[Node, ShutdownMode]],
) -> None:
    """Four writers, two tenants on each worker, through ``outages`` one after another; then
    every customer answered 201 is stored, and every one stored delivered once."""
    worlds = [
        world for worker in cluster.workers for world in _tenants_on(cluster, database, worker)
    ]
    with httpx.Client(base_url=server) as http:
        for world in worlds:
            add_ordered_endpoint(http, world, receiver.url, ["customer.created"])
    on_node = {
        node: frozenset(
            n
            for n, world in enumerate(worlds)
            if tenant_node(cluster.url, world.tenant.schema) == node
        )
        for node in cluster.workers
    }
    everyone = frozenset(range(len(worlds)))
    done: list[Outage] = []
    with worker_on_cluster(cluster.url, directory) as worker:
        with TenantWriters(server, [world.key.headers for world in worlds]) as writers:
            for node, mode in outages:
                done.append(_outage(cluster, writers, node, mode, on_node.get(node, everyone)))
        answers = writers.kept()
        for outage in done:
            print(outage.report(answers))  # for the record: pytest -s shows it
        stored = {n: _stored(cluster.url, world.tenant.schema) for n, world in enumerate(worlds)}
        halves = {w.tenant.schema: _without_event(cluster.url, w.tenant.schema) for w in worlds}
        assert not any(halves.values()), f"customers stored without their event: {halves}"
        deadline = time.monotonic() + DELIVERED_WITHIN_S
        for n, world in enumerate(worlds):
            schema = world.tenant.schema
            undelivered = partial(_undelivered, cluster.url, schema)
            worker.wait_until_delivered(schema, len(stored[n]), deadline, undelivered)

    assert unexpected(answers) == []
    for outage in done:
        during = [a for a in answers if outage.phase(a) not in ("before", "after")]
        others = [a for a in during if a.writer not in outage.affected]
        assert {a.status for a in others} <= {201}, f"{outage.node} down: {tally(others)}"
        down = [a for a in during if a.writer in outage.affected and outage.phase(a) == "down"]
        assert {a.status for a in down} >= {503}, f"{outage.node} down: {tally(down)}"
    for n in range(len(worlds)):
        created = writers.created_by(n)
        assert len(created) >= WRITES_AROUND * 2 * len(outages), tally(answers)
        assert set(created) <= set(stored[n]), "a customer answered 201 is not stored"
        # A commit whose answer the outage cut off: stored, though its client was told 503.
        not_created = {a.last_name for a in answers if a.writer == n and a.status != 201}
        assert {stored[n][id_] for id_ in set(stored[n]) - set(created)} <= not_created
    delivered = Counter(json.loads(request.body)["data"]["id"] for request in receiver.requests)
    assert delivered == Counter(id_ for rows in stored.values() for id_ in rows), (
        "a delivery lost or sent twice"
    )


def test_a_worker_or_the_coordinator_lost_and_back_answers_503_meanwhile_and_loses_nothing(
    outage_cluster: OwnCluster,
    outage_database: Database,
    outage_server: str,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    first, second = outage_cluster.workers
    coordinator = outage_cluster.coordinator
    _through_outages(
        outage_cluster,
        outage_database,
        outage_server,
        receiver,
        tmp_path,
        [(first, "fast"), (second, "immediate"), (coordinator, "fast"), (coordinator, "immediate")],
    )
