"""A record's change on a distributed schema: two statements Citus routes whole, its events
inserted with the next round trip (``record_changes.Routed``), where one server runs one
statement. The same changes, made on one server and on the cluster, answer the same and record
the same events, their data and previous values the same JSON text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ids import new_id
from dealbase.ops import admin
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.rest_api.responses import API_PREFIX
from tests.citus.conftest import forget_wakeups, wakeups
from tests.support import TenantWorld

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
_REQUEST_ID = re.compile(r'"request_id":"[0-9a-f]+"')


class _Numbered:
    """Texts with their ids numbered by first appearance, and their times and request ids left
    out: what two tenants' answers to the same requests share."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        text = _REQUEST_ID.sub('"request_id":"-"', text)
        text = _TIME.sub("<time>", text)
        return _UUID.sub(lambda found: self.ids.setdefault(found[0], f"<id {len(self.ids)}>"), text)


def _changes(
    client: TestClient, world: TenantWorld, database: Database, numbered: _Numbered
) -> Iterator[tuple[str, int, str]]:
    """Changes of each record, accepted and refused: each request with its answer."""
    headers = world.key.headers
    employee = admin.create_employee(database, world.tenant.id, world.department.id, "Ann", None)

    def call(method: str, path: str, body: Any = None, **more: str) -> dict[str, Any]:
        response = client.request(method, API_PREFIX + path, json=body, headers={**headers, **more})
        answered = numbered(response.text)
        results.append((f"{method} {numbered(path)}", response.status_code, answered))
        return dict(response.json()) if response.content else {}

    results: list[tuple[str, int, str]] = []
    call("GET", "/steps")  # the steps' ids numbered first
    call("GET", "/employees")
    lovelace = call("POST", "/customers", {"last_name": "Lovelace", "external_id": "a"})
    call("POST", "/customers", {"last_name": "Hopper", "external_id": "b"})
    path = f"/customers/{lovelace['id']}"
    call("PATCH", path, {"city": "Zürich", "last_name": "Lovelace"}, **{"If-Match": '"1"'})
    call("PATCH", path, {"city": "Zürich"})  # no value changed: a version, no event
    call("PATCH", path, {})
    call("PATCH", path, {"note": 'a "quote" \\ \n and é', "birthday": "1915-12-10"})
    call("PATCH", path, {"city": "Paris"}, **{"If-Match": '"1"'})  # 412
    call("PATCH", path, {"external_id": "b"})  # 409
    call("PATCH", f"/customers/{new_id()}", {"city": "Rome"})  # 404

    steps = client.get(f"{API_PREFIX}/steps", headers=headers).json()["data"]
    deal = call("POST", "/deals", {"name": "Engine", "customers": [{"last_name": "Babbage"}]})
    path = f"/deals/{deal['id']}"
    call(
        "PATCH",
        path,
        {"employee_id": str(employee.id), "volume": 12, "step_id": steps[1]["id"]},
    )
    call("PATCH", path, {"employee_id": None, "name": "Analytical engine"})
    call("PATCH", path, {"employee_id": str(new_id()), "step_id": str(new_id())})  # 422
    call("PUT", "/deals/by-external-id/deal-1", {"name": "Upserted"})
    call("PUT", "/deals/by-external-id/deal-1", {"name": "Renamed", "volume": 3})

    activity = call("POST", "/activities", {"type": "call", "customer_id": lovelace["id"]})
    path = f"/activities/{activity['id']}"
    call("PATCH", path, {"subject": "Follow up", "deal_id": deal["id"]})
    call("PATCH", path, {"customer_id": str(new_id())})  # 422
    yield from results


def _events(url: str, schema: str, numbered: _Numbered) -> list[tuple[Any, ...]]:
    """The schema's events as they are kept (their JSON as text), in the order recorded."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            f'SELECT type, data::text, changed_fields, previous::text FROM "{schema}".events'
            " ORDER BY sequence, id"
        ).fetchall()
    return [
        (kind, numbered(data), changed, None if previous is None else numbered(previous))
        for kind, data, changed, previous in rows
    ]


@pytest.mark.usefixtures("cluster_database")
def test_changes_answer_and_record_on_the_cluster_as_on_one_server(
    client: TestClient,
    world: TenantWorld,
    database: Database,
    database_url: str,
    cluster_client: TestClient,
    cluster_world: TenantWorld,
    cluster_database: Database,
    citus_url: str,
) -> None:
    alone, cluster = _Numbered(), _Numbered()
    answers = list(_changes(client, world, database, alone))
    cluster_answers = list(_changes(cluster_client, cluster_world, cluster_database, cluster))

    assert cluster_answers == answers
    statuses = [status for _, status, _ in answers if status >= 400]
    assert statuses == [412, 409, 404, 422, 422]
    events = _events(database_url, world.tenant.scope.schema, alone)
    assert _events(citus_url, cluster_world.tenant.scope.schema, cluster) == events
    kinds = [kind for kind, *_ in events if kind.endswith(("updated", "assigned", "changed"))]
    assert kinds == [
        "customer.updated",
        "customer.updated",
        "deal.updated",
        "deal.step_changed",
        "deal.assigned",
        "deal.updated",
        "deal.assigned",
        "deal.updated",
        "activity.updated",
    ]


def test_a_change_wakes_the_webhook_worker_when_a_value_changed(
    cluster_database: Database, cluster_world: TenantWorld, citus_url: str
) -> None:
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    with cluster_database.unit_of_work(scope) as uow:
        endpoints.create(
            uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
        )
        customer = customers.create(uow, CustomerFields(last_name="Lovelace"))
    try:
        woken = wakeups(citus_url, scope.schema)
        with cluster_database.unit_of_work(scope) as uow:
            customers.RECORD.change_later(uow, customer.id, {"city": "Paris"}).read()
        assert wakeups(citus_url, scope.schema) == woken + 1
        with cluster_database.unit_of_work(scope) as uow:
            customers.RECORD.change_later(uow, customer.id, {"city": "Paris"}).read()
        assert wakeups(citus_url, scope.schema) == woken + 1  # no event: nobody woken
    finally:
        forget_wakeups(citus_url, scope.schema)
