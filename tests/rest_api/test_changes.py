"""PATCH and DELETE of customers and deals; moving, assigning, linking and unlinking deals."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.rest_api.test_events import all_events
from tests.support import TenantWorld

API = "/api/v1/integration"


def make(client: TestClient, world: TenantWorld, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"{API}{path}", json=body, headers=world.key.headers)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def patch(client: TestClient, world: TenantWorld, path: str, body: dict[str, Any]) -> Any:
    return client.patch(f"{API}{path}", json=body, headers=world.key.headers)


def test_customer_patch_changes_only_the_fields_sent_and_null_clears(
    client: TestClient, world: TenantWorld
) -> None:
    customer = make(client, world, "/customers", {"last_name": "A", "city": "Paris", "note": "n"})

    changed = patch(client, world, f"/customers/{customer['id']}", {"city": "Rome", "note": None})

    assert changed.status_code == 200
    body = changed.json()
    assert (body["last_name"], body["city"], body["note"]) == ("A", "Rome", None)
    assert body["created_at"] == customer["created_at"]
    assert body["updated_at"] > customer["updated_at"]


def test_customer_last_name_cannot_be_cleared(client: TestClient, world: TenantWorld) -> None:
    customer = make(client, world, "/customers", {"last_name": "A"})

    for value in (None, "", "  "):
        response = patch(client, world, f"/customers/{customer['id']}", {"last_name": value})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "last_name"


def test_deleted_customer_is_gone_everywhere_and_leaves_its_deals(
    client: TestClient, world: TenantWorld
) -> None:
    deal = make(
        client,
        world,
        "/deals",
        {"name": "D", "customers": [{"last_name": "A"}, {"last_name": "B"}]},
    )
    gone, kept = deal["customers"]

    assert (
        client.delete(f"{API}/customers/{gone['id']}", headers=world.key.headers).status_code == 204
    )

    for method in ("GET", "PATCH", "DELETE"):
        response = client.request(
            method, f"{API}/customers/{gone['id']}", json={}, headers=world.key.headers
        )
        assert response.status_code == 404, method
    after = client.get(f"{API}/deals/{deal['id']}", headers=world.key.headers).json()
    assert [c["id"] for c in after["customers"]] == [kept["id"]]


def test_deal_patch_moves_assigns_and_unassigns(
    client: TestClient, world: TenantWorld, employee_of: Callable[[TenantWorld, int], uuid.UUID]
) -> None:
    deal = make(client, world, "/deals", {"name": "D", "volume": 1})
    last_step = max(world.department.steps, key=lambda step: step.position)
    employee = employee_of(world, 0)

    moved = patch(
        client,
        world,
        f"/deals/{deal['id']}",
        {"step_id": str(last_step.id), "employee_id": str(employee), "volume": 9},
    ).json()
    unassigned = patch(client, world, f"/deals/{deal['id']}", {"employee_id": None}).json()

    assert (moved["step_id"], moved["employee_id"], moved["employee_name"], moved["volume"]) == (
        str(last_step.id), str(employee), "Eve", 9,
    )  # fmt: skip
    assert (unassigned["employee_id"], unassigned["employee_name"]) == (None, None)
    assert unassigned["step_id"] == str(last_step.id)


@pytest.mark.parametrize("field", ["name", "step_id"])
def test_deal_required_fields_cannot_be_cleared(
    client: TestClient, world: TenantWorld, field: str
) -> None:
    deal = make(client, world, "/deals", {"name": "D"})

    response = patch(client, world, f"/deals/{deal['id']}", {field: None})

    assert response.status_code == 422
    assert response.json()["errors"][0]["code"] == "cannot_clear"


def test_link_appends_an_existing_customer_once_and_unlink_removes_it_each_a_deal_update(
    client: TestClient, world: TenantWorld
) -> None:
    deal = make(client, world, "/deals", {"name": "D", "customers": [{"last_name": "First"}]})
    customer = make(client, world, "/customers", {"last_name": "Linked"})
    link = f"{API}/deals/{deal['id']}/customers"

    linked = client.post(link, json={"customer_id": customer["id"]}, headers=world.key.headers)
    again = client.post(link, json={"customer_id": customer["id"]}, headers=world.key.headers)

    assert linked.status_code == again.status_code == 200
    assert [c["last_name"] for c in again.json()["customers"]] == ["First", "Linked"]
    assert again.headers["etag"] == linked.headers["etag"]
    unlink = f"{link}/{customer['id']}"
    assert client.delete(unlink, headers=world.key.headers).status_code == 204
    assert client.delete(unlink, headers=world.key.headers).status_code == 404
    after = client.get(f"{API}/deals/{deal['id']}", headers=world.key.headers).json()
    assert [c["last_name"] for c in after["customers"]] == ["First"]
    assert (
        client.get(f"{API}/customers/{customer['id']}", headers=world.key.headers).status_code
        == 200
    )
    link_event, unlink_event = all_events(client, world)[-2:]  # linking again is no change
    assert link_event["type"] == unlink_event["type"] == "deal.updated"
    assert link_event["changed_fields"] == unlink_event["changed_fields"] == ["customers"]
    assert link_event["previous"] == {"customers": deal["customers"]}
    assert link_event["data"] == linked.json()
    assert unlink_event["previous"] == {"customers": linked.json()["customers"]}
    assert unlink_event["data"] == after


def test_linking_an_unknown_or_foreign_customer_is_422(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)
    other_key = world.keys[1]
    foreign = client.post(
        f"{API}/customers", json={"last_name": "F"}, headers=other_key.headers
    ).json()
    deal = make(client, world, "/deals", {"name": "D"})

    for customer_id in (foreign["id"], str(uuid.uuid4())):
        response = client.post(
            f"{API}/deals/{deal['id']}/customers",
            json={"customer_id": customer_id},
            headers=world.key.headers,
        )
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "customer_id"


def test_deleted_deal_is_gone_and_its_customers_stay(
    client: TestClient, world: TenantWorld
) -> None:
    deal = make(client, world, "/deals", {"name": "D", "customers": [{"last_name": "A"}]})

    assert client.delete(f"{API}/deals/{deal['id']}", headers=world.key.headers).status_code == 204

    assert client.get(f"{API}/deals/{deal['id']}", headers=world.key.headers).status_code == 404
    customer_id = deal["customers"][0]["id"]
    assert (
        client.get(f"{API}/customers/{customer_id}", headers=world.key.headers).status_code == 200
    )


def test_deleting_a_deal_is_a_change_of_its_activities(
    client: TestClient, world: TenantWorld
) -> None:
    deal = make(client, world, "/deals", {"name": "D", "customers": [{"last_name": "A"}]})
    activity = client.post(
        f"{API}/activities",
        json={"type": "call", "customer_id": deal["customers"][0]["id"], "deal_id": deal["id"]},
        headers=world.key.headers,
    )

    client.delete(f"{API}/deals/{deal['id']}", headers=world.key.headers)

    after = client.get(activity.headers["location"], headers=world.key.headers)
    assert after.json()["deal_id"] is None
    assert after.headers["etag"] != activity.headers["etag"]
    assert after.json()["updated_at"] > activity.json()["updated_at"]


def test_deal_patch_names_every_unknown_reference(client: TestClient, world: TenantWorld) -> None:
    deal = make(client, world, "/deals", {"name": "D"})

    response = patch(
        client,
        world,
        f"/deals/{deal['id']}",
        {"step_id": str(uuid.uuid4()), "employee_id": str(uuid.uuid4())},
    )

    assert [e["field"] for e in response.json()["errors"]] == ["step_id", "employee_id"]


@pytest.mark.parametrize("resource", ["deals", "activities"])
def test_patch_of_an_unknown_id_is_404_before_the_ids_in_its_body_are_judged(
    client: TestClient, world: TenantWorld, resource: str
) -> None:
    body = (
        {"step_id": str(uuid.uuid4())}
        if resource == "deals"
        else {"customer_id": str(uuid.uuid4()), "employee_id": str(uuid.uuid4())}
    )

    response = patch(client, world, f"/{resource}/{uuid.uuid4()}", body)

    assert response.status_code == 404
