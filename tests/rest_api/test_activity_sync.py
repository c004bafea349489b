"""PUT /activities/by-external-id/{external_id} and POST /activities/batch: a sync's activities,
created or changed by the client's own ids, one at a time or up to a thousand per request."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.rest_api.records_support import API, RECORDS, a_customer
from tests.rest_api.test_events import all_events
from tests.support import TenantWorld

ACTIVITY = RECORDS["activities"]
ACTIVITIES = f"{API}/activities"


@pytest.fixture
def customer_id(client: TestClient, world: TenantWorld) -> str:
    return a_customer(client, world.key.headers)


def test_an_upsert_creates_the_activity_then_changes_only_the_fields_it_gives(
    client: TestClient, world: TenantWorld, customer_id: str
) -> None:
    body = {"type": "call", "customer_id": customer_id, "subject": "Quote", "note": "n"}
    created = ACTIVITY.put(client, world.key.headers, "call-1", body)

    assert created.status_code == 201, created.text
    first = created.json()
    assert created.headers["location"] == f"{ACTIVITIES}/{first['id']}"
    assert created.headers["etag"] == '"1"'
    assert (first["external_id"], first["subject"], first["note"]) == ("call-1", "Quote", "n")

    changed = ACTIVITY.put(
        client,
        world.key.headers,
        "call-1",
        {"type": "call", "customer_id": customer_id, "done_at": "2026-12-01T10:00:00+01:00"},
    )

    assert changed.status_code == 200, changed.text
    assert changed.headers["etag"] == '"2"'
    after = changed.json()
    assert after["id"] == first["id"]
    assert (after["subject"], after["note"], after["done_at"]) == (
        "Quote", "n", "2026-12-01T09:00:00.000000Z",
    )  # fmt: skip
    assert after["created_at"] == first["created_at"]
    assert client.get(created.headers["location"], headers=world.key.headers).json() == after
    events = all_events(client, world)
    assert [event["type"] for event in events[1:]] == ["activity.created", "activity.updated"]
    assert events[2]["changed_fields"] == ["done_at"]
    assert events[2]["previous"] == {"done_at": None}
    assert events[2]["data"] == after


def test_an_upsert_that_changes_nothing_writes_nothing(
    client: TestClient, world: TenantWorld, customer_id: str
) -> None:
    body = {"type": "call", "customer_id": customer_id, "due_at": "2026-12-01T09:00:00Z"}
    first = ACTIVITY.put(client, world.key.headers, "call-1", body)

    again = ACTIVITY.put(client, world.key.headers, "call-1", body)
    # The same moment in another offset is the same value.
    shifted = ACTIVITY.put(
        client, world.key.headers, "call-1", {**body, "due_at": "2026-12-01T10:00:00+01:00"}
    )

    for response in (again, shifted):
        assert response.status_code == 200
        assert response.json() == first.json()
        assert response.headers["etag"] == '"1"'
    assert [event["type"] for event in all_events(client, world)] == [
        "customer.created",
        "activity.created",
    ]


def test_an_upsert_checks_the_references_as_create_and_update_do(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)
    own = a_customer(client, world.keys[0].headers)
    foreign = a_customer(client, world.keys[1].headers)
    ACTIVITY.put(client, world.key.headers, "existing", {"type": "note", "customer_id": own})

    for external_id in ("new", "existing"):
        for body, field in (
            ({"type": "note", "customer_id": foreign}, "customer_id"),
            ({"type": "note", "customer_id": own, "deal_id": str(uuid.uuid4())}, "deal_id"),
            ({"type": "note", "customer_id": own, "employee_id": str(uuid.uuid4())}, "employee_id"),
        ):
            response = ACTIVITY.put(client, world.key.headers, external_id, body)
            assert response.status_code == 422, (external_id, field)
            assert [(e["field"], e["code"]) for e in response.json()["errors"]] == [
                (field, "not_found")
            ]
        missing = ACTIVITY.put(client, world.key.headers, external_id, {"type": "note"})
        assert missing.status_code == 422
        assert [e["field"] for e in missing.json()["errors"]] == ["customer_id"]
    assert [activity["external_id"] for activity in ACTIVITY.listed(client, world.key.headers)] == [
        "existing"
    ]


def test_a_batch_creates_an_activity_of_another_type_and_changes_anothers_subject(
    client: TestClient, world: TenantWorld, customer_id: str
) -> None:
    """What every record's batch answers alike (a taken id, a failed rule, the others written)
    is in test_record_sync; an activity's own rules (its deal, its type) fail there too."""

    def data(**fields: Any) -> dict[str, Any]:
        return {"type": "call", "customer_id": customer_id, **fields}

    headers = world.key.headers
    ACTIVITY.batch(client, headers, [{"op": "upsert", "external_id": "k", "data": data()}])
    operations = [
        {"op": "create", "data": data(type="meeting")},
        {"op": "upsert", "external_id": "k", "data": data(subject="Kept")},
    ]

    response = ACTIVITY.batch(client, headers, operations)

    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(r["status"], r["outcome"]) for r in results] == [(201, "created"), (200, "updated")]
    assert (results[0]["data"]["type"], results[1]["data"]["subject"]) == ("meeting", "Kept")
    listed = ACTIVITY.listed(client, headers)
    assert sorted(str(activity["external_id"]) for activity in listed) == ["None", "k"]


def test_an_atomic_batch_names_an_activitys_unknown_customer_and_writes_nothing(
    client: TestClient, world: TenantWorld, customer_id: str
) -> None:
    operations = [
        {"op": "upsert", "external_id": "a", "data": {"type": "call", "customer_id": customer_id}},
        {"op": "create", "data": {"type": "call", "customer_id": str(uuid.uuid4())}},
    ]

    response = ACTIVITY.batch(client, world.key.headers, operations, atomic=True)

    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "batch_rejected"
    assert [(f["index"], f["error"]["code"]) for f in body["failures"]] == [
        (1, "validation_failed")
    ]
    assert body["failures"][0]["error"]["errors"][0]["field"] == "operations[1].data.customer_id"
    assert ACTIVITY.listed(client, world.key.headers) == []
    assert [event["type"] for event in all_events(client, world)] == ["customer.created"]

    accepted = ACTIVITY.batch(client, world.key.headers, operations[:1], atomic=True)
    assert accepted.status_code == 200
    assert accepted.json()["summary"]["created"] == 1
