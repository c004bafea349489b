"""GET /events and the events the REST calls cause: each change once, in commit order, its
``data`` exactly what the resource's GET returns (for a deletion, as it was)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from tests.rest_api.records_support import RECORDS
from tests.support import TenantWorld

API = "/api/v1/integration"
EVENTS = f"{API}/events"
LIFE = ("created", "updated", "deleted")  # the event types of a record made, changed, deleted


def feed(client: TestClient, world: TenantWorld, **params: Any) -> dict[str, Any]:
    response = client.get(EVENTS, params=params, headers=world.key.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def all_events(client: TestClient, world: TenantWorld) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = feed(client, world, limit=100)["data"]
    return events


def post(client: TestClient, world: TenantWorld, path: str, body: dict[str, Any]) -> Any:
    response = client.post(f"{API}{path}", json=body, headers=world.key.headers)
    assert response.status_code == 201, response.text
    return response.json()


def read(client: TestClient, world: TenantWorld, path: str) -> Any:
    return client.get(f"{API}{path}", headers=world.key.headers).json()


@pytest.mark.parametrize(
    ("plural", "made", "change", "previous"),
    [
        (
            "customers",
            {"last_name": "Lovelace", "city": "London"},
            {"city": "Paris", "first_name": "Ada"},
            # In the customer's field order, whatever the order sent.
            {"first_name": None, "city": "London"},
        ),
        ("deals", {"name": "Engine"}, {"volume": 7}, {"volume": None}),
        ("activities", {"type": "call"}, {"subject": "Quote"}, {"subject": None}),
    ],
)
def test_a_records_events_carry_it_as_its_get_returns_it(
    client: TestClient,
    world: TenantWorld,
    plural: str,
    made: dict[str, Any],
    change: dict[str, Any],
    previous: dict[str, Any],
) -> None:
    required = {**RECORDS[plural].required(client, world.key.headers), **made}
    earlier = len(all_events(client, world))  # an activity's customer's
    created = post(client, world, f"/{plural}", required)
    path = f"/{plural}/{created['id']}"
    client.patch(f"{API}{path}", json=change, headers=world.key.headers)
    updated = read(client, world, path)
    client.delete(f"{API}{path}", headers=world.key.headers)

    events = all_events(client, world)[earlier:]

    noun = RECORDS[plural].noun
    assert [event["type"] for event in events] == [f"{noun}.{verb}" for verb in LIFE]
    assert events[0]["data"] == created
    assert events[1]["data"] == updated
    assert events[1]["changed_fields"] == list(previous)
    assert events[1]["previous"] == previous
    assert events[2]["data"] == updated
    for event in events:
        assert event["tenant_id"] == str(world.tenant.id)
        assert event["department_id"] == str(world.department.id)
        assert set(event) >= {"id", "type", "created_at", "tenant_id", "department_id", "data"}
    assert "changed_fields" not in events[0] and "previous" not in events[0]


def test_a_patch_that_changes_no_value_is_no_event(client: TestClient, world: TenantWorld) -> None:
    created = post(client, world, "/customers", {"last_name": "Lovelace"})
    client.patch(
        f"{API}/customers/{created['id']}",
        json={"last_name": "Lovelace"},
        headers=world.key.headers,
    )

    assert [event["type"] for event in all_events(client, world)] == ["customer.created"]


def test_a_deal_with_three_new_customers_is_three_customer_events_and_one_deal_event(
    client: TestClient, world: TenantWorld
) -> None:
    deal = post(
        client,
        world,
        "/deals",
        {"name": "Engine", "customers": [{"last_name": name} for name in ("A", "B", "C")]},
    )

    events = all_events(client, world)

    assert [event["type"] for event in events] == ["customer.created"] * 3 + ["deal.created"]
    assert [event["data"] for event in events[:3]] == deal["customers"]
    assert events[3]["data"] == read(client, world, f"/deals/{deal['id']}") == deal


def test_moving_and_assigning_a_deal_is_an_update_a_step_change_and_an_assignment(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    deal = post(client, world, "/deals", {"name": "Engine"})
    steps = read(client, world, "/steps")["data"]
    employee = create_employee(database, world.tenant.id, world.department.id, "Grace", None)
    client.patch(
        f"{API}/deals/{deal['id']}",
        json={"step_id": steps[1]["id"], "employee_id": str(employee.id), "volume": 7},
        headers=world.key.headers,
    )
    moved = read(client, world, f"/deals/{deal['id']}")

    events = all_events(client, world)[1:]

    assert [event["type"] for event in events] == [
        "deal.updated",
        "deal.step_changed",
        "deal.assigned",
    ]
    assert all(event["data"] == moved for event in events)
    assert events[0]["changed_fields"] == ["volume", "step_id", "employee_id"]
    assert events[0]["previous"] == {
        "volume": None,
        "step_id": steps[0]["id"],
        "employee_id": None,
    }
    assert events[1]["changed_fields"] == ["step_id"]
    assert events[1]["previous"] == {"step_id": steps[0]["id"]}
    assert events[2]["changed_fields"] == ["employee_id"]
    assert events[2]["previous"] == {"employee_id": None}


def test_a_deleted_deal_is_told_as_it_was(client: TestClient, world: TenantWorld) -> None:
    deal = post(client, world, "/deals", {"name": "Engine", "customers": [{"last_name": "A"}]})
    client.delete(f"{API}/deals/{deal['id']}", headers=world.key.headers)

    event = all_events(client, world)[-1]

    assert event["type"] == "deal.deleted"
    assert event["data"] == deal


def test_a_change_refused_mid_transaction_writes_no_event(
    client: TestClient, world: TenantWorld
) -> None:
    deal = post(client, world, "/deals", {"name": "Engine"})
    stale = {**world.key.headers, "If-Match": '"99"'}

    refused = [
        client.patch(f"{API}/deals/{deal['id']}", json={"name": "X"}, headers=stale),
        # The deal is read and its activities detached before the guarded delete is refused.
        client.delete(f"{API}/deals/{deal['id']}", headers=stale),
        client.post(
            f"{API}/deals",
            json={"name": "Y", "customers": [{"last_name": "A"}, {"last_name": ""}]},
            headers=world.key.headers,
        ),
    ]

    assert [response.status_code for response in refused] == [412, 412, 422]
    assert [event["type"] for event in all_events(client, world)] == ["deal.created"]


def test_the_feed_gives_each_event_once_across_pages_and_polls_on_from_an_empty_page(
    client: TestClient, world: TenantWorld
) -> None:
    made = [post(client, world, "/customers", {"last_name": f"C{n}"})["id"] for n in range(7)]

    seen: list[str] = []
    cursor, pages = None, 0
    while True:
        page = feed(client, world, limit=3, **({"after": cursor} if cursor else {}))
        pages += 1
        cursor = page["next_cursor"]
        if not page["data"]:
            break
        seen.extend(event["data"]["id"] for event in page["data"])
    later = post(client, world, "/customers", {"last_name": "Later"})["id"]
    polled = feed(client, world, after=cursor)

    assert seen == made
    assert pages == 4
    assert [event["data"]["id"] for event in polled["data"]] == [later]


def test_the_feed_filters_by_type(client: TestClient, world: TenantWorld) -> None:
    deal = post(client, world, "/deals", {"name": "Engine", "customers": [{"last_name": "A"}]})
    client.delete(f"{API}/deals/{deal['id']}", headers=world.key.headers)

    page = feed(client, world, types="deal.created,deal.deleted")
    after_first = feed(client, world, types="deal.created,deal.deleted", limit=1)

    assert [event["type"] for event in page["data"]] == ["deal.created", "deal.deleted"]
    rest = feed(client, world, types="deal.created,deal.deleted", after=after_first["next_cursor"])
    assert [event["type"] for event in rest["data"]] == ["deal.deleted"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"types": "deal.exploded"}, "types"),
        ({"types": ""}, "types"),
        ({"after": "not-a-cursor"}, "after"),
        ({"after": "A" * 19}, "after"),
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
    ],
)
def test_bad_parameters_are_422_problems(
    client: TestClient, world: TenantWorld, params: dict[str, Any], field: str
) -> None:
    response = client.get(EVENTS, params=params, headers=world.key.headers)

    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_a_cursor_of_other_types_is_refused(client: TestClient, world: TenantWorld) -> None:
    cursor = feed(client, world, types="deal.created")["next_cursor"]

    response = client.get(EVENTS, params={"after": cursor}, headers=world.key.headers)

    assert response.status_code == 422


def test_the_feed_never_shows_another_departments_or_tenants_events(
    client: TestClient, make_tenant: Any
) -> None:
    mine, other = make_tenant(departments=2), make_tenant()
    for world in (mine, other):
        post(client, world, "/customers", {"last_name": "Mine"})
    neighbour = client.post(
        f"{API}/customers", json={"last_name": "Neighbour"}, headers=mine.keys[1].headers
    )
    assert neighbour.status_code == 201

    events = all_events(client, mine)

    assert [event["data"]["last_name"] for event in events] == ["Mine"]
    assert {event["department_id"] for event in events} == {str(mine.department.id)}


def test_a_customer_create_records_its_event_in_its_insert_and_takes_no_position_lock(
    client: TestClient, world: TenantWorld
) -> None:
    database: Database = client.app.state.database  # type: ignore[attr-defined]
    sent: list[str] = []
    post(client, world, "/customers", {"last_name": "Warm"})  # the key cached
    database.statement_listeners.append(sent.append)
    try:
        post(client, world, "/customers", {"last_name": "Lovelace"})
    finally:
        database.statement_listeners.remove(sent.append)

    # Besides BEGIN and COMMIT: one statement, the customer's INSERT with its event's. It
    # leaves the department's position row alone: the events are numbered once committed, by
    # their readers.
    assert len(sent) == 1
    assert ".customers " in sent[0] and ".events " in sent[0]
    assert "event_positions" not in sent[0]
