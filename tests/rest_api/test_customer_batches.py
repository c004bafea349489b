"""POST /customers/batch: up to a thousand creates and upserts in one request, per operation or
all or nothing, in a fixed number of statements."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from dealbase.edge.request_edge import MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES
from dealbase.platform.batches.models import MAX_OPERATIONS
from tests.rest_api.records_support import API, RECORDS
from tests.rest_api.test_events import all_events
from tests.support import TenantWorld

CUSTOMERS = f"{API}/customers"
BATCH = f"{CUSTOMERS}/batch"
CUSTOMER = RECORDS["customers"]
upsert, create = CUSTOMER.upsert_operation, CUSTOMER.create_operation


def send(
    client: TestClient,
    world: TenantWorld,
    operations: list[dict[str, Any]],
    *,
    atomic: bool = False,
    headers: dict[str, str] | None = None,
) -> Any:
    return CUSTOMER.batch(
        client, {**world.key.headers, **(headers or {})}, operations, atomic=atomic
    )


def test_a_batch_of_a_thousand_upserts_creates_them_all_in_order(
    client: TestClient, world: TenantWorld
) -> None:
    operations = [upsert(f"shop-{n:04}", first_name=f"N{n}") for n in range(MAX_OPERATIONS)]

    response = send(client, world, operations)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["summary"] == {"created": 1000, "updated": 0, "unchanged": 0, "failed": 0}
    assert [(r["status"], r["outcome"]) for r in body["results"]] == [(201, "created")] * 1000
    assert [r["data"]["external_id"] for r in body["results"]] == [
        f"shop-{n:04}" for n in range(1000)
    ]
    assert [r["data"]["first_name"] for r in body["results"]] == [f"N{n}" for n in range(1000)]
    assert len(CUSTOMER.listed(client, world.key.headers)) == 1000


def test_a_second_sync_updates_the_changed_and_leaves_the_rest(
    client: TestClient, world: TenantWorld
) -> None:
    send(client, world, [upsert(f"shop-{n}", city="London") for n in range(10)])
    before = {c["external_id"]: c for c in CUSTOMER.listed(client, world.key.headers)}

    operations = [upsert(f"shop-{n}", city="Paris" if n < 3 else "London") for n in range(10)]
    body = send(client, world, operations).json()

    assert body["summary"] == {"created": 0, "updated": 3, "unchanged": 7, "failed": 0}
    assert [r["outcome"] for r in body["results"]] == ["updated"] * 3 + ["unchanged"] * 7
    after = {c["external_id"]: c for c in CUSTOMER.listed(client, world.key.headers)}
    assert len(after) == 10
    for n in range(10):
        key = f"shop-{n}"
        if n < 3:
            assert after[key]["city"] == "Paris"
            assert after[key]["updated_at"] > before[key]["updated_at"]
        else:
            assert after[key] == before[key]
    events = all_events(client, world)
    assert [e["type"] for e in events] == ["customer.created"] * 10 + ["customer.updated"] * 3
    assert [e["data"]["external_id"] for e in events[10:]] == ["shop-0", "shop-1", "shop-2"]
    assert {tuple(e["changed_fields"]) for e in events[10:]} == {("city",)}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"operations": []}, "operations"),
        ({"operations": [upsert(str(n)) for n in range(MAX_OPERATIONS + 1)]}, "operations"),
        ({"operations": [{"op": "upsert", "data": {"last_name": "A"}}]}, "operations[0]"),
        (
            {"operations": [{"op": "create", "external_id": "a", "data": {"last_name": "A"}}]},
            "operations[0]",
        ),
        ({"operations": [{"op": "delete", "data": {}}]}, "operations[0].op"),
        ({"operations": [{"op": "create", "data": []}]}, "operations[0].data"),
        ({"operations": [upsert("a b")]}, "operations[0].external_id"),
        ({"items": []}, "operations"),
    ],
)
def test_a_malformed_batch_is_refused_whole(
    client: TestClient, world: TenantWorld, body: dict[str, Any], field: str
) -> None:
    response = client.post(BATCH, json=body, headers=world.key.headers)

    assert response.status_code == 422, response.text
    assert field in [error["field"] for error in response.json()["errors"]]
    assert CUSTOMER.listed(client, world.key.headers) == []


def test_a_batch_body_may_be_larger_than_other_bodies_up_to_its_own_limit(
    client: TestClient, world: TenantWorld
) -> None:
    note = "n" * 5_000
    operations = [upsert(f"shop-{n}", note=note) for n in range(MAX_OPERATIONS)]
    within = orjson.dumps({"operations": operations})
    assert MAX_BODY_BYTES < len(within) < MAX_BATCH_BODY_BYTES
    beyond = orjson.dumps({"operations": [upsert(f"{n}", note="n" * 9_000) for n in range(1000)]})
    assert len(beyond) > MAX_BATCH_BODY_BYTES
    headers = {**world.key.headers, "Content-Type": "application/json"}

    accepted = client.post(BATCH, content=within, headers=headers)
    refused = client.post(BATCH, content=beyond, headers=headers)
    single = client.post(CUSTOMERS, content=b" " * MAX_BODY_BYTES + b"{}", headers=headers)

    assert accepted.status_code == 200
    assert refused.status_code == 413
    assert single.status_code == 413


def test_an_idempotency_key_replays_a_batch_and_tells_its_modes_apart(
    client: TestClient, world: TenantWorld
) -> None:
    key = {"Idempotency-Key": "nightly-2026-11-23-part-1"}
    operations = [upsert("a"), create()]

    first = send(client, world, operations, headers=key)
    replay = send(client, world, operations, headers=key)
    other_mode = send(client, world, operations, atomic=True, headers=key)

    assert first.status_code == replay.status_code == 200
    assert replay.json() == first.json()
    assert replay.headers["idempotent-replayed"] == "true"
    assert other_mode.status_code == 422
    assert other_mode.json()["code"] == "idempotency_key_reused"
    assert len(CUSTOMER.listed(client, world.key.headers)) == 2
