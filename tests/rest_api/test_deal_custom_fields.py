"""Deals carry the tenant's custom fields in ``custom_fields`` as customers do: written by their
create (the new customers' own fields too, judged by the customer's definitions), PUT, batch and
PATCH, every bad field named, shown by the answer, the reads and the events. A tenant without
fields of deals shows none and refuses any."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.custom_field_support import SCALARS, define_scalars, define_select
from tests.rest_api.test_custom_fields import define, field_codes, tenant_wide
from tests.support import TenantWorld

API = "/api/v1/integration"
DEALS = f"{API}/deals"
CUSTOMERS = f"{API}/customers"


@pytest.fixture
def admin_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    return tenant_wide(database, world)


@pytest.fixture
def options(client: TestClient, admin_headers: dict[str, str]) -> dict[str, str]:
    """Fields of deals of the types worth telling apart, and a customer's text and select;
    the selects' options' ids by label."""
    define_scalars(client, admin_headers, "deal", [each for each in SCALARS if each[0] != "vip"])
    stage = define_select(client, admin_headers, "deal", "stage", ["Won", "Lost"])
    tags = define_select(client, admin_headers, "deal", "tags", ["a", "b"], multi=True)
    define(client, admin_headers, record="customer", name="ref", label="Ref", type="text")
    tier = define_select(client, admin_headers, "customer", "tier", ["Gold"], multi=True)
    return {"won": stage["Won"], "a": tags["a"], "b": tags["b"], "gold": tier["Gold"]}


def _events(client: TestClient, world: TenantWorld, kind: str) -> list[dict[str, Any]]:
    found = client.get(f"{API}/events", headers=world.key.headers).json()["data"]
    return [event for event in found if event["type"] == kind]


def test_a_created_deal_and_its_new_customers_hold_their_custom_values_and_their_events_show_them(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    values = {
        "contract": "C-1",
        "seats": 12,
        "revenue": "1234.50",
        "renewal": "2027-01-31",
        "signed_at": "2026-12-01T10:00:00Z",
        "stage": options["won"],
        "tags": [options["b"], options["a"]],
    }
    response = client.post(
        DEALS,
        json={
            "name": "Engine",
            "custom_fields": values,
            "customers": [
                {"last_name": "Ada", "custom_fields": {"ref": "R-1", "tier": [options["gold"]]}},
                {"last_name": "Charles"},
            ],
        },
        headers=world.key.headers,
    )

    assert response.status_code == 201, response.text
    deal = response.json()
    assert deal["custom_fields"] == {**values, "signed_at": "2026-12-01T10:00:00.000000Z"}
    assert client.get(f"{DEALS}/{deal['id']}", headers=world.key.headers).json() == deal
    assert client.get(DEALS, headers=world.key.headers).json()["data"] == [deal]
    ada, charles = (
        client.get(f"{CUSTOMERS}/{customer['id']}", headers=world.key.headers).json()
        for customer in deal["customers"]
    )
    assert ada["custom_fields"] == {"ref": "R-1", "tier": [options["gold"]]}
    assert charles["custom_fields"] == {"ref": None, "tier": None}
    assert [event["data"] for event in _events(client, world, "deal.created")] == [deal]
    assert [event["data"] for event in _events(client, world, "customer.created")] == [
        ada,
        charles,
    ]


def test_a_batch_create_writes_the_deal_and_customer_values_and_names_a_bad_one_within_its_operation(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    response = client.post(
        f"{DEALS}/batch",
        json={
            "operations": [
                {
                    "op": "create",
                    "data": {
                        "name": "Engine",
                        "custom_fields": {"seats": 3},
                        "customers": [{"last_name": "Ada", "custom_fields": {"ref": "R-2"}}],
                    },
                },
                {"op": "create", "data": {"name": "Mill", "custom_fields": {"seats": "3"}}},
                {
                    "op": "create",
                    "data": {
                        "name": "Loom",
                        "customers": [{"last_name": "B", "custom_fields": {"ref": 1}}],
                    },
                },
            ]
        },
        headers=world.key.headers,
    )

    assert response.status_code == 200, response.text
    first, second, third = response.json()["results"]
    deal = first["data"]
    assert deal["custom_fields"]["seats"] == 3
    assert client.get(f"{DEALS}/{deal['id']}", headers=world.key.headers).json() == deal
    customer = client.get(f"{CUSTOMERS}/{deal['customers'][0]['id']}", headers=world.key.headers)
    assert customer.json()["custom_fields"]["ref"] == "R-2"
    assert [error["field"] for error in second["error"]["errors"]] == [
        "operations[1].data.custom_fields.seats"
    ]
    assert [error["field"] for error in third["error"]["errors"]] == [
        "operations[2].data.customers[0].custom_fields.ref"
    ]


def test_every_bad_or_unknown_value_of_the_deal_and_its_customers_is_named_at_once(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    response = client.post(
        DEALS,
        json={
            "name": "Engine",
            "custom_fields": {"seats": 1.5, "stage": options["a"], "nope": 1},
            "customers": [
                {"last_name": "Ada"},
                {"last_name": "B", "custom_fields": {"tier": [options["won"]], "nope": 1}},
            ],
        },
        headers=world.key.headers,
    )

    assert response.status_code == 422, response.text
    assert field_codes(response) >= {
        ("custom_fields.nope", "unknown_field"),
        ("customers[1].custom_fields.nope", "unknown_field"),
    }
    assert {field for field, _ in field_codes(response)} == {
        "custom_fields.seats",
        "custom_fields.stage",
        "custom_fields.nope",
        "customers[1].custom_fields.tier[0]",
        "customers[1].custom_fields.nope",
    }
    assert client.get(DEALS, headers=world.key.headers).json()["data"] == []


def test_a_required_field_missing_from_a_deal_or_its_customer_is_named(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, record="deal", name="region", label="Region", required=True)
    define(client, admin_headers, record="customer", name="ref", label="Ref", required=True)

    missing = client.post(
        DEALS,
        json={"name": "Engine", "customers": [{"last_name": "Ada", "custom_fields": {}}]},
        headers=world.key.headers,
    )
    given = client.post(
        DEALS,
        json={
            "name": "Engine",
            "custom_fields": {"region": "EU"},
            "customers": [{"last_name": "Ada", "custom_fields": {"ref": "R"}}],
        },
        headers=world.key.headers,
    )

    assert missing.status_code == 422, missing.text
    assert field_codes(missing) == {
        ("custom_fields.region", "missing"),
        ("customers[0].custom_fields.ref", "missing"),
    }
    assert given.status_code == 201, given.text
    assert given.json()["custom_fields"] == {"region": "EU"}


def test_an_upsert_creates_then_changes_custom_values_and_its_events_name_them(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    path = f"{DEALS}/by-external-id/order-1"
    created = client.put(
        path,
        json={"name": "Engine", "custom_fields": {"seats": 1, "revenue": "10.5"}},
        headers=world.key.headers,
    )
    changed = client.put(
        path, json={"name": "Engine", "custom_fields": {"seats": 2}}, headers=world.key.headers
    )
    again = client.put(
        path, json={"name": "Engine", "custom_fields": {"seats": 2}}, headers=world.key.headers
    )

    assert created.status_code == 201, created.text
    assert created.json()["custom_fields"]["seats"] == 1
    assert [event["data"] for event in _events(client, world, "deal.created")] == [created.json()]
    assert changed.status_code == 200, changed.text
    assert changed.json()["custom_fields"] == {**created.json()["custom_fields"], "seats": 2}
    assert again.status_code == 200, again.text
    assert again.json() == changed.json()
    (updated,) = _events(client, world, "deal.updated")
    assert updated["changed_fields"] == ["custom_fields.seats"]
    assert updated["previous"] == {"custom_fields.seats": 1}
    assert updated["data"] == changed.json()


def test_a_batch_upsert_creates_and_changes_custom_values(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    def upsert(seats: int) -> dict[str, Any]:
        response = client.post(
            f"{DEALS}/batch",
            json={
                "operations": [
                    {
                        "op": "upsert",
                        "external_id": "order-2",
                        "data": {"name": "Mill", "custom_fields": {"seats": seats}},
                    }
                ]
            },
            headers=world.key.headers,
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["results"][0]
        return result

    created, changed = upsert(5), upsert(6)

    assert created["outcome"] == "created"
    assert created["data"]["custom_fields"]["seats"] == 5
    assert changed["outcome"] == "updated"
    assert changed["data"]["custom_fields"]["seats"] == 6
    read = client.get(f"{DEALS}/{created['data']['id']}", headers=world.key.headers)
    assert read.json() == changed["data"]


def test_a_patch_and_a_link_show_the_custom_values_and_the_patch_event_names_them(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    deal = client.post(
        DEALS,
        json={"name": "Engine", "custom_fields": {"seats": 1, "contract": "C"}},
        headers=world.key.headers,
    ).json()
    customer = client.post(CUSTOMERS, json={"last_name": "Ada"}, headers=world.key.headers)

    patched = client.patch(
        f"{DEALS}/{deal['id']}",
        json={"custom_fields": {"seats": 2, "tags": [options["a"]]}},
        headers=world.key.headers,
    )
    linked = client.post(
        f"{DEALS}/{deal['id']}/customers",
        json={"customer_id": customer.json()["id"]},
        headers=world.key.headers,
    )

    assert patched.status_code == 200, patched.text
    assert patched.json()["custom_fields"] == {
        **deal["custom_fields"],
        "seats": 2,
        "tags": [options["a"]],
    }
    assert linked.status_code == 200, linked.text
    assert linked.json()["custom_fields"] == patched.json()["custom_fields"]
    on_patch, on_link = _events(client, world, "deal.updated")
    assert on_patch["changed_fields"] == ["custom_fields.seats", "custom_fields.tags"]
    assert on_patch["previous"] == {"custom_fields.seats": 1, "custom_fields.tags": None}
    assert on_link["changed_fields"] == ["customers"]
    assert on_link["data"] == linked.json()


def test_a_tenant_without_deal_fields_shows_none_and_refuses_any(
    client: TestClient, world: TenantWorld
) -> None:
    created = client.post(
        DEALS,
        json={"name": "Engine", "customers": [{"last_name": "Ada"}]},
        headers=world.key.headers,
    )
    refused = [
        client.post(
            DEALS, json={"name": "Engine", "custom_fields": {"x": 1}}, headers=world.key.headers
        ),
        client.post(
            DEALS,
            json={"name": "Engine", "customers": [{"last_name": "A", "custom_fields": {"x": 1}}]},
            headers=world.key.headers,
        ),
        client.put(
            f"{DEALS}/by-external-id/order-3",
            json={"name": "Engine", "custom_fields": {"x": 1}},
            headers=world.key.headers,
        ),
        client.patch(
            f"{DEALS}/{created.json()['id']}",
            json={"custom_fields": {"x": 1}},
            headers=world.key.headers,
        ),
    ]

    assert created.status_code == 201, created.text
    assert "custom_fields" not in created.json()
    assert "custom_fields" not in created.json()["customers"][0]
    assert [event["data"] for event in _events(client, world, "deal.created")] == [created.json()]
    assert [response.status_code for response in refused] == [422] * 4
    assert [field_codes(response) for response in refused] == [
        {("custom_fields.x", "unknown_field")},
        {("customers[0].custom_fields.x", "unknown_field")},
        {("custom_fields.x", "unknown_field")},
        {("custom_fields.x", "unknown_field")},
    ]


def test_customer_fields_alone_are_written_by_a_deal_create_which_shows_no_deal_fields(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, record="customer", name="ref", label="Ref")

    response = client.post(
        DEALS,
        json={"name": "Engine", "customers": [{"last_name": "Ada", "custom_fields": {"ref": "R"}}]},
        headers=world.key.headers,
    )

    assert response.status_code == 201, response.text
    assert "custom_fields" not in response.json()
    customer_id = response.json()["customers"][0]["id"]
    customer = client.get(f"{CUSTOMERS}/{customer_id}", headers=world.key.headers).json()
    assert customer["custom_fields"] == {"ref": "R"}
    assert [event["data"] for event in _events(client, world, "customer.created")] == [customer]


def test_a_deal_with_a_unique_value_another_deal_has_is_a_conflict(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    headers = tenant_wide(database, world)
    define(client, headers, record="deal", name="order_no", label="Order", type="text", unique=True)
    body = {"name": "Engine", "custom_fields": {"order_no": "O-1"}}
    client.post(DEALS, json=body, headers=world.key.headers).raise_for_status()

    again = client.post(DEALS, json=body, headers=world.key.headers)

    assert (again.status_code, again.json()["code"]) == (409, "value_taken")


def test_a_change_or_upsert_to_a_unique_value_another_deal_has_is_a_conflict(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    headers = tenant_wide(database, world)
    define(client, headers, record="deal", name="order_no", label="Order", type="text", unique=True)
    taken = {"custom_fields": {"order_no": "O-1"}}
    client.post(DEALS, json={"name": "A", **taken}, headers=world.key.headers).raise_for_status()
    other = client.post(DEALS, json={"name": "B"}, headers=world.key.headers).json()

    changed = client.patch(f"{DEALS}/{other['id']}", json=taken, headers=world.key.headers)
    upserted = client.put(
        f"{DEALS}/by-external-id/d-1", json={"name": "C", **taken}, headers=world.key.headers
    )

    assert (changed.status_code, changed.json()["code"]) == (409, "value_taken")
    assert (upserted.status_code, upserted.json()["code"]) == (409, "value_taken")
