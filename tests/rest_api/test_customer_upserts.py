"""PUT /customers/by-external-id/{external_id}: create or change the customer a client knows by
its own id, and external ids on the other customer operations."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.rest_api.records_support import API, RECORDS
from tests.rest_api.test_events import all_events
from tests.support import TenantWorld

CUSTOMERS = f"{API}/customers"


CUSTOMER = RECORDS["customers"]


def test_an_upsert_of_a_new_external_id_creates_the_customer(
    client: TestClient, world: TenantWorld
) -> None:
    response = CUSTOMER.put(
        client, world.key.headers, "shop-1", {"last_name": "Lovelace", "city": "London"}
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert body["external_id"] == "shop-1"
    assert (body["last_name"], body["city"]) == ("Lovelace", "London")
    assert response.headers["etag"] == '"1"'
    assert response.headers["location"] == f"{CUSTOMERS}/{body['id']}"
    assert client.get(response.headers["location"], headers=world.key.headers).json() == body


def test_an_upsert_of_a_known_external_id_changes_only_the_fields_it_gives(
    client: TestClient, world: TenantWorld
) -> None:
    first = CUSTOMER.put(
        client, world.key.headers, "shop-1", {"last_name": "Lovelace", "city": "London"}
    ).json()

    response = CUSTOMER.put(
        client, world.key.headers, "shop-1", {"last_name": "King", "email": "ada@example.com"}
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == first["id"]
    assert (body["last_name"], body["email"], body["city"]) == (
        "King",
        "ada@example.com",
        "London",
    )
    assert response.headers["etag"] == '"2"'
    assert body["created_at"] == first["created_at"]
    assert body["updated_at"] > first["updated_at"]


def test_an_upsert_that_changes_nothing_writes_nothing(
    client: TestClient, world: TenantWorld
) -> None:
    first = CUSTOMER.put(
        client, world.key.headers, "shop-1", {"last_name": "Lovelace", "city": "London"}
    )

    again = CUSTOMER.put(
        client, world.key.headers, "shop-1", {"last_name": "Lovelace", "city": "London"}
    )
    subset = CUSTOMER.put(client, world.key.headers, "shop-1", {"last_name": "Lovelace"})

    for response in (again, subset):
        assert response.status_code == 200
        assert response.json() == first.json()
        assert response.headers["etag"] == '"1"'
    assert [event["type"] for event in all_events(client, world)] == ["customer.created"]


def test_upserts_are_events_as_single_writes_are(client: TestClient, world: TenantWorld) -> None:
    CUSTOMER.put(client, world.key.headers, "shop-1", {"last_name": "Lovelace", "city": "London"})
    body = {"city": "Paris", "last_name": "Lovelace", "first_name": "Ada"}
    updated = CUSTOMER.put(client, world.key.headers, "shop-1", body).json()

    events = all_events(client, world)

    assert [event["type"] for event in events] == ["customer.created", "customer.updated"]
    assert events[1]["data"] == updated
    # In the customer's field order, as a PATCH's event names them.
    assert events[1]["changed_fields"] == ["first_name", "city"]
    assert events[1]["previous"] == {"first_name": None, "city": "London"}


def test_an_upsert_body_is_what_creating_takes(client: TestClient, world: TenantWorld) -> None:
    CUSTOMER.put(client, world.key.headers, "shop-1", {"last_name": "Lovelace"})

    # The same request must serve both cases, so last_name is required even for an update.
    response = CUSTOMER.put(client, world.key.headers, "shop-1", {"city": "Paris"})

    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["last_name"]


def test_an_external_id_outside_the_documented_characters_is_refused(
    client: TestClient, world: TenantWorld
) -> None:
    # ("." and "..", which clients resolve as path steps, are checked in tests/platform/batches.)
    for bad in ("with%20space", "%C3%A9t%C3%A9", "x" * 256, "a%2Fb", "a%3Fb"):
        response = CUSTOMER.put(client, world.key.headers, bad, {"last_name": "A"})
        assert response.status_code in (404, 422), (bad, response.status_code)
        if response.status_code == 422:
            assert response.json()["errors"][0]["field"] == "external_id"
    for good in ("erp:42", "a.b_c-d~e", "ada@example.com", "x" * 255):
        assert (
            CUSTOMER.put(client, world.key.headers, good, {"last_name": "A"}).status_code == 201
        ), good


def test_an_external_id_ending_in_a_newline_is_refused_in_the_path(
    client: TestClient, world: TenantWorld
) -> None:
    # The document's pattern ends at the end of the text; Python's $ also matches before a
    # last "\n", so the check must take the whole text.
    response = CUSTOMER.put(client, world.key.headers, "abc%0A", {"last_name": "A"})

    assert response.status_code == 422
    problem = response.json()
    assert problem["code"] == "validation_failed"
    assert [(e["field"], e["code"]) for e in problem["errors"]] == [
        ("external_id", "invalid_format")
    ]
    assert client.get(CUSTOMERS, headers=world.key.headers).json()["data"] == []


def test_a_patch_may_set_or_clear_an_external_id_but_not_take_anothers(
    client: TestClient, world: TenantWorld
) -> None:
    CUSTOMER.put(client, world.key.headers, "shop-1", {"last_name": "Lovelace"})
    other = client.post(CUSTOMERS, json={"last_name": "B"}, headers=world.key.headers).json()
    path = f"{CUSTOMERS}/{other['id']}"

    taken = client.patch(path, json={"external_id": "shop-1"}, headers=world.key.headers)
    set_ = client.patch(path, json={"external_id": "shop-2"}, headers=world.key.headers)
    cleared = client.patch(path, json={"external_id": None}, headers=world.key.headers)

    assert taken.status_code == 409 and taken.json()["code"] == "external_id_taken"
    assert set_.status_code == 200 and set_.json()["external_id"] == "shop-2"
    assert cleared.status_code == 200 and cleared.json()["external_id"] is None


def test_lists_filter_by_external_id_exactly(client: TestClient, world: TenantWorld) -> None:
    CUSTOMER.put(client, world.key.headers, "Shop-1", {"last_name": "Upper"})
    CUSTOMER.put(client, world.key.headers, "shop-1", {"last_name": "Lower"})
    CUSTOMER.put(client, world.key.headers, "shop-10", {"last_name": "Longer"})

    found = client.get(CUSTOMERS, params={"external_id": "shop-1"}, headers=world.key.headers)

    assert [c["last_name"] for c in found.json()["data"]] == ["Lower"]
