"""Records carry the tenant's custom fields in ``custom_fields``: written by every write route,
judged by each field's type (every bad field named at once), shown by every read and carried
by the events."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.rest_api.test_custom_fields import define, field_codes, tenant_wide
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"


@pytest.fixture
def admin_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    return tenant_wide(database, world)


@pytest.fixture
def tier(client: TestClient, admin_headers: dict[str, str]) -> dict[str, Any]:
    """A customer field of each type worth telling apart, and the select's options."""
    for name, kind in (
        ("contract", "text"),
        ("seats", "integer"),
        ("revenue", "decimal"),
        ("vip", "boolean"),
        ("renewal", "date"),
        ("signed_at", "timestamp"),
    ):
        define(client, admin_headers, name=name, label=name, type=kind)
    select = define(
        client,
        admin_headers,
        name="tier",
        label="Tier",
        type="single_select",
        options=[{"label": "Gold"}, {"label": "Silver"}],
    )
    tags = define(
        client,
        admin_headers,
        name="tags",
        label="Tags",
        type="multi_select",
        options=[{"label": "a"}, {"label": "b"}],
    )
    return {
        "gold": select["options"][0]["id"],
        "a": tags["options"][0]["id"],
        "b": tags["options"][1]["id"],
    }


def test_a_created_customer_carries_its_custom_values_and_every_field_of_the_tenant(
    client: TestClient, world: TenantWorld, tier: dict[str, Any]
) -> None:
    values = {
        "contract": "C-1",
        "seats": 12,
        "revenue": "1234.50",
        "vip": True,
        "renewal": "2027-01-31",
        "signed_at": "2026-12-01T10:00:00Z",
        "tier": tier["gold"],
        "tags": [tier["b"], tier["a"]],
    }
    response = client.post(
        CUSTOMERS, json={"last_name": "Ada", "custom_fields": values}, headers=world.key.headers
    )

    assert response.status_code == 201, response.text
    shown = response.json()["custom_fields"]
    assert shown == {**values, "signed_at": "2026-12-01T10:00:00.000000Z"}
    read = client.get(f"{CUSTOMERS}/{response.json()['id']}", headers=world.key.headers)
    assert read.json() == response.json()
    listed = client.get(CUSTOMERS, headers=world.key.headers).json()["data"]
    assert listed == [response.json()]


def test_every_bad_custom_value_is_named_at_once(
    client: TestClient, world: TenantWorld, tier: dict[str, Any]
) -> None:
    response = client.post(
        CUSTOMERS,
        json={
            "last_name": "Ada",
            "custom_fields": {"seats": "12", "vip": 1, "tier": tier["a"], "nope": 1},
        },
        headers=world.key.headers,
    )

    assert response.status_code == 422, response.text
    assert {field for field, _ in field_codes(response)} == {
        "custom_fields.seats",
        "custom_fields.vip",
        "custom_fields.tier",
        "custom_fields.nope",
    }


def test_a_patch_changes_the_custom_values_it_gives_and_its_event_names_them(
    client: TestClient, world: TenantWorld, tier: dict[str, Any]
) -> None:
    created = client.post(
        CUSTOMERS,
        json={"last_name": "Ada", "custom_fields": {"seats": 1, "contract": "C"}},
        headers=world.key.headers,
    ).json()

    response = client.patch(
        f"{CUSTOMERS}/{created['id']}",
        json={"custom_fields": {"seats": 2}},
        headers=world.key.headers,
    )

    assert response.status_code == 200, response.text
    assert response.json()["custom_fields"]["seats"] == 2
    assert response.json()["custom_fields"]["contract"] == "C"
    events = client.get("/api/v1/integration/events", headers=world.key.headers).json()["data"]
    updated = [event for event in events if event["type"] == "customer.updated"]
    assert updated[-1]["changed_fields"] == ["custom_fields.seats"]
    assert updated[-1]["previous"] == {"custom_fields.seats": 1}


def test_an_upsert_and_a_batch_write_custom_values(
    client: TestClient, world: TenantWorld, tier: dict[str, Any]
) -> None:
    upserted = client.put(
        f"{CUSTOMERS}/by-external-id/x-1",
        json={"last_name": "Ada", "custom_fields": {"seats": 3}},
        headers=world.key.headers,
    )
    batch = client.post(
        f"{CUSTOMERS}/batch",
        json={
            "operations": [
                {
                    "op": "upsert",
                    "external_id": "x-1",
                    "data": {"last_name": "Ada", "custom_fields": {"seats": 4}},
                },
                {"op": "create", "data": {"last_name": "B", "custom_fields": {"seats": "x"}}},
            ]
        },
        headers=world.key.headers,
    )

    assert upserted.status_code == 201, upserted.text
    assert upserted.json()["custom_fields"]["seats"] == 3
    assert batch.status_code == 200, batch.text
    results = batch.json()["results"]
    assert results[0]["data"]["custom_fields"]["seats"] == 4
    assert results[1]["error"]["errors"][0]["field"] == "operations[1].data.custom_fields.seats"


def test_a_created_activity_answers_its_custom_values_as_its_read_shows_them(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, record="activity", name="mood", label="Mood", type="text")
    customer = client.post(CUSTOMERS, json={"last_name": "Ada"}, headers=world.key.headers)

    created = client.post(
        "/api/v1/integration/activities",
        json={
            "type": "call",
            "customer_id": customer.json()["id"],
            "custom_fields": {"mood": "calm"},
        },
        headers=world.key.headers,
    )

    assert created.status_code == 201, created.text
    assert created.json()["custom_fields"] == {"mood": "calm"}
    read = client.get(created.headers["Location"], headers=world.key.headers)
    assert read.json() == created.json()
