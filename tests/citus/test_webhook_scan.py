"""The webhook worker's visit of a distributed schema: every statement it sends the tenant's
schema (the scan for new events, the deliveries it makes and records) is routed whole to the
tenant's worker (``plans``). The scan is two statements there, where a single server runs one:
it still makes one delivery of each event an endpoint subscribes to, past where the endpoint
stood, and a scan that waited for another makes none of the same again."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from dealbase.db.database import PREPARE_AFTER, Database
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields, CustomerPatch
from dealbase.platform.events import service as events
from dealbase.platform.webhooks import delivery_repository
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, EventChoice, WebhookEndpointFields
from dealbase.tenancy.coordination import wakeups
from dealbase.tenancy.scope import Scope
from dealbase.worker.delivery import DeliveryWorker
from dealbase.worker.sending import Sender
from tests.citus.conftest import cluster_rows
from tests.citus.plans import assert_routed_whole, statements_sent
from tests.support import TenantWorld
from tests.worker.conftest import ALLOW_PRIVATE, Receiver, add_endpoint

_URL = "https://8.8.8.8/hooks"


def test_a_visit_of_the_webhook_worker_sends_only_statements_routed_whole(
    cluster_database: Database,
    cluster_world: TenantWorld,
    receiver: Receiver,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_endpoint(cluster_database, cluster_world, receiver.url, ordered=True)
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    for name in ("Lovelace", "Hopper"):
        with cluster_database.unit_of_work(scope) as uow:
            customers.create(uow, CustomerFields(last_name=name))

    worker = DeliveryWorker(cluster_database, Sender(ALLOW_PRIVATE), jitter=lambda: 1.0)

    async def visit() -> None:
        try:
            await worker.visit(scope.schema)
        finally:
            await worker.sender.close()

    with statements_sent(monkeypatch) as sent:
        asyncio.run(visit())

    assert len(receiver.requests) == 2
    assert_routed_whole(citus_url, sent)


@pytest.fixture
def scope(cluster_database: Database, cluster_world: TenantWorld) -> Iterator[Scope]:
    """The cluster world's department; the worker's wakeups its writes add are deleted after."""
    yield cluster_world.tenant.scope.in_department(cluster_world.department.id)
    with cluster_database.control() as connection:
        wakeups.forget_schema(connection, cluster_world.tenant.schema)


def _endpoint(
    database: Database, scope: Scope, kinds: list[EventChoice], *, ordered: bool
) -> uuid.UUID:
    fields = WebhookEndpointFields(url=_URL, events=kinds, ordered=ordered)
    with database.unit_of_work(scope) as uow:
        return endpoints.create(uow, Checked(fields)).id


def _scan(database: Database, scope: Scope, now: datetime) -> None:
    """A scan as the worker's first step makes it: the committed events numbered first."""
    with database.unit_of_work(scope) as uow:
        departments = delivery_repository.subscribing_departments(uow.connection)
        events.number_all_committed(uow, departments)
        delivery_repository.scan(uow.connection, now)


def _deliveries(citus_url: str, schema: str) -> set[tuple[object, ...]]:
    """Each delivery: its endpoint, its event's customer and type, its place in line, its state
    and times (whether its event's position where it has one)."""
    rows = cluster_rows(
        citus_url,
        "SELECT d.endpoint_id, e.data->>'last_name', d.event_type,"
        " d.position IS NOT DISTINCT FROM e.position, d.position IS NULL,"
        " d.state, d.next_attempt_at, d.created_at, d.started_at"
        f' FROM "{schema}".webhook_deliveries d JOIN "{schema}".events e ON e.id = d.event_id',
    )
    return {tuple(row) for row in rows}


def _ids_in_order_made(citus_url: str, schema: str) -> list[uuid.UUID]:
    """The deliveries' ids, by endpoint and then event position: the order a scan makes them."""
    rows = cluster_rows(
        citus_url,
        f'SELECT d.id FROM "{schema}".webhook_deliveries d'
        f' JOIN "{schema}".events e ON e.id = d.event_id ORDER BY d.endpoint_id, e.position',
    )
    return [row[0] for row in rows]


def _scanned(citus_url: str, schema: str) -> dict[uuid.UUID, int]:
    return dict(
        cluster_rows(citus_url, f'SELECT id, scanned_position FROM "{schema}".webhook_endpoints')
    )


def test_a_scan_makes_a_delivery_of_each_subscribed_event_after_the_endpoints_start(
    cluster_database: Database, scope: Scope, citus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cluster_database.unit_of_work(scope) as uow:
        customers.create(uow, CustomerFields(last_name="Before"))
    ordered = _endpoint(cluster_database, scope, ["customer.created"], ordered=True)
    loose = _endpoint(cluster_database, scope, ["*"], ordered=False)
    assert _scanned(citus_url, scope.schema) == {ordered: 1, loose: 1}
    with cluster_database.unit_of_work(scope) as uow:
        lovelace = customers.create(uow, CustomerFields(last_name="Lovelace"))
    with cluster_database.unit_of_work(scope) as uow:
        customers.RECORD.update(uow, lovelace.id, CustomerPatch(city="London"))
    with cluster_database.unit_of_work(scope) as uow:
        customers.create(uow, CustomerFields(last_name="Hopper"))
    now = datetime.now(UTC)

    _scan(cluster_database, scope, now)

    pending = ("pending", now, now, now)
    assert _deliveries(citus_url, scope.schema) == {
        (ordered, "Lovelace", "customer.created", True, False, *pending),
        (ordered, "Hopper", "customer.created", True, False, *pending),
        (loose, "Lovelace", "customer.created", False, True, *pending),
        (loose, "Lovelace", "customer.updated", False, True, *pending),
        (loose, "Hopper", "customer.created", False, True, *pending),
    }
    assert _scanned(citus_url, scope.schema) == {ordered: 4, loose: 4}
    # UUIDv7s, in the order the scan made them (the log lists deliveries by id).
    ids = _ids_in_order_made(citus_url, scope.schema)
    assert ids == sorted(ids)
    assert {(each.version, each.variant) for each in ids} == {(7, uuid.RFC_4122)}

    with statements_sent(monkeypatch) as sent:
        _scan(cluster_database, scope, datetime.now(UTC))
    assert not [
        each for each in sent if "INSERT INTO" in each.sql and "webhook_deliveries" in each.sql
    ]
    assert len(_deliveries(citus_url, scope.schema)) == 5


def _wait_until_a_scan_waits_for_a_lock(citus_url: str, schema: str) -> None:
    """Returns once a statement of ``schema`` waits for a lock on its worker (``citus_lock_waits``,
    which sees the cluster's every node); fails after 10 s."""
    deadline = time.monotonic() + 10
    with psycopg.connect(citus_url, autocommit=True) as connection:
        while not connection.execute(
            "SELECT count(*) FROM citus_lock_waits WHERE blocked_statement LIKE %s",
            [f"%{schema}.webhook_endpoints%"],
        ).fetchall()[0][0]:
            assert time.monotonic() < deadline, "no scan waited on a lock in 10 s"
            time.sleep(0.01)


def test_a_scan_waits_for_another_and_then_makes_none_of_its_deliveries_again(
    cluster_database: Database,
    cluster_world: TenantWorld,
    scope: Scope,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _endpoint(cluster_database, scope, ["*"], ordered=True)
    for name in ("Lovelace", "Hopper"):
        with cluster_database.unit_of_work(scope) as uow:
            customers.create(uow, CustomerFields(last_name=name))
    with cluster_database.unit_of_work(scope) as uow:
        events.number_all_committed(uow, [cluster_world.department.id])
    now = datetime.now(UTC)
    failures: list[BaseException] = []

    def second() -> None:
        try:
            with cluster_database.unit_of_work(scope) as uow:
                delivery_repository.scan(uow.connection, now)
        except BaseException as failed:  # the test's thread reports it
            failures.append(failed)

    with statements_sent(monkeypatch) as sent:
        with cluster_database.unit_of_work(scope) as uow:
            delivery_repository.scan(uow.connection, now)
            waiting = threading.Thread(target=second)
            waiting.start()
            _wait_until_a_scan_waits_for_a_lock(citus_url, scope.schema)
        waiting.join(timeout=30)

    assert not waiting.is_alive() and failures == []
    made = [each for each in sent if "INSERT INTO" in each.sql and "webhook_deliveries" in each.sql]
    assert len(made) == 1
    assert len(_deliveries(citus_url, scope.schema)) == 2


def test_a_scan_run_past_the_point_its_statements_are_prepared_makes_each_delivery(
    citus_url: str, scope: Scope
) -> None:
    """Citus plans a prepared statement, run with parameters, differently (``PREPARE_AFTER``)."""
    database = Database(citus_url, pool_size=1, max_overflow=0, distributed_schemas=True)
    try:
        _endpoint(database, scope, ["*"], ordered=True)
        for made in range(1, PREPARE_AFTER + 4):
            with database.unit_of_work(scope) as uow:
                customers.create(uow, CustomerFields(last_name=f"c{made}"))
            _scan(database, scope, datetime.now(UTC))
            assert len(_deliveries(citus_url, scope.schema)) == made
    finally:
        database.dispose()
