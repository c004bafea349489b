"""Records carry the tenant's custom fields in ``custom_fields``: written by every write route,
judged by each field's type (every bad field named at once), shown by every read and carried
by the events."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.custom_field_support import define_scalars, define_select
from tests.rest_api.test_custom_fields import define, field_codes, tenant_wide
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"
ACTIVITIES = "/api/v1/integration/activities"


@pytest.fixture
def admin_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    return tenant_wide(database, world)


@pytest.fixture
def tier(client: TestClient, admin_headers: dict[str, str]) -> dict[str, Any]:
    """A customer field of each type worth telling apart, and the selects' options."""
    define_scalars(client, admin_headers, "customer")
    gold = define_select(client, admin_headers, "customer", "tier", ["Gold", "Silver"])
    tags = define_select(client, admin_headers, "customer", "tags", ["a", "b"], multi=True)
    return {"gold": gold["Gold"], "a": tags["a"], "b": tags["b"]}


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


def test_a_select_takes_only_its_live_options_and_a_multi_select_each_once(
    client: TestClient, world: TenantWorld, tier: dict[str, Any]
) -> None:
    def create(values: dict[str, Any]) -> Any:
        return client.post(
            CUSTOMERS,
            json={"last_name": "Ada", "custom_fields": values},
            headers=world.key.headers,
        )

    stranger = str(uuid.uuid4())
    refused = create({"tier": stranger, "tags": [tier["a"], stranger]})
    twice = create({"tags": [tier["a"], tier["a"].upper()]})
    taken = create({"tier": tier["gold"], "tags": [tier["b"], tier["a"]]})
    none = create({"tags": []})

    assert (refused.status_code, field_codes(refused)) == (
        422,
        {("custom_fields.tier", "not_an_option"), ("custom_fields.tags[1]", "not_an_option")},
    )
    assert (twice.status_code, field_codes(twice)) == (
        422,
        {("custom_fields.tags", "duplicate_item")},
    )
    assert taken.status_code == 201, taken.text
    assert taken.json()["custom_fields"]["tier"] == tier["gold"]
    assert taken.json()["custom_fields"]["tags"] == [tier["b"], tier["a"]]
    assert none.status_code == 201, none.text
    assert none.json()["custom_fields"]["tags"] == []


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


def test_a_list_is_filtered_on_indexed_custom_fields_by_equality_range_and_membership(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer", filterable=True)
    define(client, admin_headers, name="code", label="Code", type="text", unique=True)
    tier = define(
        client,
        admin_headers,
        name="tier",
        label="Tier",
        type="single_select",
        options=[{"label": "Gold"}, {"label": "Silver"}, {"label": "Bronze"}],
        filterable=True,
    )
    gold, silver, bronze = (option["id"] for option in tier["options"])
    for number, level in zip(
        range(1, 7), (gold, silver, bronze, gold, silver, bronze), strict=True
    ):
        client.post(
            CUSTOMERS,
            json={
                "last_name": f"N{number}",
                "custom_fields": {"seats": number, "code": f"C-{number}", "tier": level},
            },
            headers=world.key.headers,
        ).raise_for_status()

    def names(**params: str) -> list[str]:
        response = client.get(CUSTOMERS, params=params, headers=world.key.headers)
        assert response.status_code == 200, response.text
        return [customer["last_name"] for customer in response.json()["data"]]

    assert names(**{"custom_fields.code": "C-3"}) == ["N3"]
    assert names(**{"custom_fields.seats.gte": "2", "custom_fields.seats.lte": "4"}) == [
        "N2",
        "N3",
        "N4",
    ]
    assert names(**{"custom_fields.tier": f"{gold},{bronze}"}) == ["N1", "N3", "N4", "N6"]
    assert names(**{"custom_fields.tier": silver, "custom_fields.seats.gte": "3"}) == ["N5"]


def test_a_page_of_a_filtered_list_goes_on_under_the_same_filters_only(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer", filterable=True)
    for number in range(4):
        client.post(
            CUSTOMERS,
            json={"last_name": f"N{number}", "custom_fields": {"seats": 5}},
            headers=world.key.headers,
        ).raise_for_status()
    first = client.get(
        CUSTOMERS, params={"custom_fields.seats": "5", "limit": 2}, headers=world.key.headers
    ).json()

    same = client.get(
        CUSTOMERS,
        params={"custom_fields.seats": "5", "limit": 2, "cursor": first["next_cursor"]},
        headers=world.key.headers,
    )
    other = client.get(
        CUSTOMERS,
        params={"custom_fields.seats": "6", "limit": 2, "cursor": first["next_cursor"]},
        headers=world.key.headers,
    )

    assert [c["last_name"] for c in same.json()["data"]] == ["N2", "N3"]
    assert (other.status_code, field_codes(other)) == (422, {("cursor", "invalid_cursor")})


def test_a_filter_on_an_unknown_unindexed_or_mistyped_field_is_refused_naming_it(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer", filterable=True)
    define(client, admin_headers, name="note2", label="Note", type="text")

    unknown = client.get(CUSTOMERS, params={"custom_fields.nope": "1"}, headers=world.key.headers)
    unindexed = client.get(
        CUSTOMERS, params={"custom_fields.note2": "x"}, headers=world.key.headers
    )
    mistyped = client.get(
        CUSTOMERS,
        params={"custom_fields.seats.gte": "many", "custom_fields.seats.between": "1"},
        headers=world.key.headers,
    )

    assert (unknown.status_code, field_codes(unknown)) == (
        422,
        {("custom_fields.nope", "unknown_field")},
    )
    assert (unindexed.status_code, field_codes(unindexed)) == (
        422,
        {("custom_fields.note2", "not_filterable")},
    )
    assert mistyped.status_code == 422
    assert {field for field, _ in field_codes(mistyped)} == {
        "custom_fields.seats.gte",
        "custom_fields.seats.between",
    }


def test_a_batch_upserts_by_a_unique_custom_field(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="contract", label="Contract", type="text", unique=True)
    define(client, admin_headers, name="seats", label="Seats", type="integer")

    def upsert(seats: int, last_name: str = "Ada") -> dict[str, Any]:
        data = {"last_name": last_name, "custom_fields": {"contract": "C-1", "seats": seats}}
        response = client.post(
            f"{CUSTOMERS}/batch",
            json={
                "operations": [
                    {"op": "upsert", "upsert_key": "custom_fields.contract", "data": data}
                ]
            },
            headers=world.key.headers,
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["results"][0]
        return result

    created, changed, unchanged = upsert(1), upsert(2), upsert(2)

    assert (created["outcome"], changed["outcome"], unchanged["outcome"]) == (
        "created",
        "updated",
        "unchanged",
    )
    assert changed["data"]["id"] == created["data"]["id"]
    assert changed["data"]["custom_fields"] == {"contract": "C-1", "seats": 2}
    listed = client.get(CUSTOMERS, headers=world.key.headers).json()["data"]
    assert [customer["custom_fields"]["contract"] for customer in listed] == ["C-1"]


def test_an_upsert_key_must_be_a_unique_field_and_its_value_given(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="contract", label="Contract", type="text", unique=True)
    define(client, admin_headers, name="seats", label="Seats", type="integer")

    def batch(key: str, data: dict[str, Any]) -> Any:
        return client.post(
            f"{CUSTOMERS}/batch",
            json={"operations": [{"op": "upsert", "upsert_key": key, "data": data}]},
            headers=world.key.headers,
        )

    not_unique = batch("custom_fields.seats", {"last_name": "A", "custom_fields": {"seats": 1}})
    missing = batch("custom_fields.contract", {"last_name": "A"})

    assert (not_unique.status_code, field_codes(not_unique)) == (
        422,
        {("upsert_key", "not_unique")},
    )
    assert missing.status_code == 200
    assert missing.json()["results"][0]["error"]["errors"][0]["field"] == (
        "operations[0].data.custom_fields.contract"
    )


def test_a_value_of_a_unique_field_another_customer_has_is_a_conflict(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="contract", label="Contract", type="text", unique=True)
    body = {"last_name": "Ada", "custom_fields": {"contract": "C-1"}}
    client.post(CUSTOMERS, json=body, headers=world.key.headers).raise_for_status()

    again = client.post(CUSTOMERS, json=body, headers=world.key.headers)

    assert (again.status_code, again.json()["code"]) == (409, "value_taken")
    assert "custom_fields.contract" in again.json()["detail"]


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


def test_an_activity_with_a_unique_value_another_has_is_a_conflict(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, record="activity", name="ticket", label="T", unique=True)
    customer = client.post(CUSTOMERS, json={"last_name": "Ada"}, headers=world.key.headers).json()
    body = {"type": "call", "customer_id": customer["id"], "custom_fields": {"ticket": "T-1"}}
    client.post(ACTIVITIES, json=body, headers=world.key.headers).raise_for_status()

    again = client.post(ACTIVITIES, json=body, headers=world.key.headers)

    assert (again.status_code, again.json()["code"]) == (409, "value_taken")


def test_a_tenant_neither_writes_nor_sees_another_tenants_fields(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    admin_headers: dict[str, str],
    make_tenant: Callable[..., TenantWorld],
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer", filterable=True)
    other = make_tenant()

    written = client.post(
        CUSTOMERS,
        json={"last_name": "B", "custom_fields": {"seats": 1}},
        headers=other.key.headers,
    )
    filtered = client.get(CUSTOMERS, params={"custom_fields.seats": "1"}, headers=other.key.headers)
    created = client.post(CUSTOMERS, json={"last_name": "B"}, headers=other.key.headers)

    assert (written.status_code, field_codes(written)) == (
        422,
        {("custom_fields.seats", "unknown_field")},
    )
    assert (filtered.status_code, field_codes(filtered)) == (
        422,
        {("custom_fields.seats", "unknown_field")},
    )
    assert "custom_fields" not in created.json()


def test_an_integer_past_64_bits_is_refused_naming_its_field(
    client: TestClient, world: TenantWorld, tier: dict[str, Any]
) -> None:
    response = client.post(
        CUSTOMERS,
        json={"last_name": "Ada", "custom_fields": {"seats": 2**70}},
        headers=world.key.headers,
    )

    assert (response.status_code, field_codes(response)) == (
        422,
        {("custom_fields.seats", "out_of_range")},
    )


def test_a_required_field_is_needed_by_a_create_and_never_cleared(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="region", label="Region", required=True)

    missing = client.post(CUSTOMERS, json={"last_name": "Ada"}, headers=world.key.headers)
    created = client.post(
        CUSTOMERS,
        json={"last_name": "Ada", "custom_fields": {"region": "EMEA"}},
        headers=world.key.headers,
    )
    cleared = client.patch(
        f"{CUSTOMERS}/{created.json()['id']}",
        json={"custom_fields": {"region": None}},
        headers=world.key.headers,
    )
    kept = client.patch(
        f"{CUSTOMERS}/{created.json()['id']}", json={"city": "Paris"}, headers=world.key.headers
    )

    assert (missing.status_code, field_codes(missing)) == (
        422,
        {("custom_fields.region", "missing")},
    )
    assert cleared.status_code == 422
    assert {field for field, _ in field_codes(cleared)} == {"custom_fields.region"}
    assert kept.json()["custom_fields"] == {"region": "EMEA"}
