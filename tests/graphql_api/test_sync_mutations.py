"""Upserts and batches over GraphQL: the platform's services REST's PUT by external id and
POST /batch call, with their outcomes, per-operation errors and all-or-nothing batches."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.config import Settings
from dealbase.platform.batches.models import MAX_OPERATIONS
from tests.graphql_api.support import (
    SyncMutations,
    codes_of,
    data_of,
    external_ids,
    field_errors,
    only_error,
)
from tests.rest_api.rate_limit_support import State, serving, slow_limits, state
from tests.support import FakeClock, TenantWorld

CUSTOMER = SyncMutations("Customer", "CustomerInput", "lastName", "firstName city")
UPSERT_CUSTOMER, BATCH_CUSTOMERS = CUSTOMER.upsert_document, CUSTOMER.batch_document
upsert, create = CUSTOMER.upsert_operation, CUSTOMER.create_operation


# --- upserts -------------------------------------------------------------------------------


def test_an_upsert_null_clears_a_field(client: TestClient, world: TenantWorld) -> None:
    CUSTOMER.upsert(client, world.key.headers, "crm-1", city="London")

    cleared = CUSTOMER.upsert(client, world.key.headers, "crm-1", city=None)

    assert (cleared["outcome"], cleared["customer"]["city"]) == ("UPDATED", None)


def test_an_upsert_may_repeat_its_external_id_in_its_input(
    client: TestClient, world: TenantWorld
) -> None:
    found = CUSTOMER.upsert(client, world.key.headers, "crm-1", externalId="crm-1")

    assert (found["outcome"], found["customer"]["externalId"]) == ("CREATED", "crm-1")


# --- batches -------------------------------------------------------------------------------


def test_a_batch_creates_and_upserts_in_order_and_a_second_sync_updates_the_changed(
    client: TestClient, world: TenantWorld
) -> None:
    operations = [upsert(f"shop-{n}", city="Rome") for n in range(5)] + [create(externalId="new")]

    first = data_of(client, BATCH_CUSTOMERS, {"operations": operations}, world.key.headers)
    operations[1] = upsert("shop-1", city="Oslo")
    second = data_of(client, BATCH_CUSTOMERS, {"operations": operations[:5]}, world.key.headers)

    results = first["batchCustomers"]["results"]
    assert [(r["index"], r["outcome"]) for r in results] == [(n, "CREATED") for n in range(6)]
    assert [r["customer"]["externalId"] for r in results] == [
        *(f"shop-{n}" for n in range(5)),
        "new",
    ]
    assert all(r["error"] is None for r in results)
    assert first["batchCustomers"]["summary"] == {
        "created": 6,
        "updated": 0,
        "unchanged": 0,
        "failed": 0,
    }
    again = second["batchCustomers"]
    assert [r["outcome"] for r in again["results"]] == ["UNCHANGED", "UPDATED"] + ["UNCHANGED"] * 3
    assert (
        again["results"][1]["customer"]["city"],
        again["results"][1]["customer"]["version"],
    ) == (
        "Oslo",
        2,
    )
    assert again["summary"] == {"created": 0, "updated": 1, "unchanged": 4, "failed": 0}
    assert external_ids(client, world, "customers") == [*(f"shop-{n}" for n in range(5)), "new"]


def test_an_atomic_batch_with_a_failure_writes_nothing_and_names_every_failure(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    CUSTOMER.upsert(client, headers, "taken")

    invalid = CUSTOMER.batch(
        client, headers, [upsert("a"), create(email="bad"), upsert("b", lastName=" ")], atomic=True
    )
    conflicting = CUSTOMER.batch(
        client, headers, [upsert("a"), create(externalId="taken")], atomic=True
    )

    error = only_error(invalid)
    assert error["extensions"]["code"] == "batch_rejected"
    assert error["path"] == ["batchCustomers"]
    failures = error["extensions"]["failures"]
    assert [(f["index"], f["code"]) for f in failures] == [
        (1, "validation_failed"),
        (2, "validation_failed"),
    ]
    assert [(e["field"], e["code"]) for e in failures[0]["errors"]] == [
        ("operations[1].data.email", "invalid_format")
    ]
    assert [(e["field"], e["code"]) for e in failures[1]["errors"]] == [
        ("operations[2].data.lastName", "blank")
    ]
    assert all(f["message"] for f in failures)
    conflict = only_error(conflicting)
    assert conflict["extensions"]["code"] == "batch_rejected"
    assert conflict["extensions"]["failures"] == [
        {
            "index": 1,
            "code": "external_id_taken",
            "message": conflict["extensions"]["failures"][0]["message"],
            "errors": [],
        }
    ]
    assert external_ids(client, world, "customers") == ["taken"]


def test_an_atomic_batch_without_failures_writes_everything(
    client: TestClient, world: TenantWorld
) -> None:
    body = CUSTOMER.batch(
        client, world.key.headers, [upsert("a"), create(), create(externalId="c")], atomic=True
    )

    assert body["data"]["batchCustomers"]["summary"]["created"] == 3
    assert external_ids(client, world, "customers") == ["a", None, "c"]


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        ([], [("operations", "too_few_items")]),
        ([upsert(str(n)) for n in range(MAX_OPERATIONS + 1)], [("operations", "too_many_items")]),
        ([{"op": "UPSERT", "data": {"lastName": "A"}}], [("operations[0]", "missing")]),
        (
            [{"op": "CREATE", "externalId": "a", "data": {"lastName": "A"}}],
            [("operations[0]", "unknown_field")],
        ),
        ([upsert("a b")], [("operations[0].externalId", "invalid_format")]),
    ],
    ids=["empty", "too-many", "upsert-without-external-id", "create-with-external-id", "bad-id"],
)
def test_a_malformed_batch_is_refused_whole(
    client: TestClient,
    world: TenantWorld,
    operations: list[dict[str, Any]],
    expected: list[tuple[str, str]],
) -> None:
    error = only_error(CUSTOMER.batch(client, world.key.headers, [*operations]))

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == expected
    assert external_ids(client, world, "customers") == []


def test_a_batch_of_a_thousand_operations_is_written(
    client: TestClient, world: TenantWorld
) -> None:
    operations = [upsert(f"shop-{n:04}") for n in range(MAX_OPERATIONS)]

    found = data_of(client, BATCH_CUSTOMERS, {"operations": operations}, world.key.headers)

    assert found["batchCustomers"]["summary"]["created"] == MAX_OPERATIONS


def test_an_operation_missing_a_required_field_is_refused_by_graphql_before_anything_runs(
    client: TestClient, world: TenantWorld
) -> None:
    body = CUSTOMER.batch(client, world.key.headers, [upsert("a"), {"op": "CREATE", "data": {}}])

    assert codes_of(body) == ["validation_failed"]
    assert [e["field"] for e in body["errors"][0]["extensions"]["errors"]] == [
        "operations[1].data.lastName"
    ]
    assert external_ids(client, world, "customers") == []


def test_a_batch_counts_one_request_per_hundred_operations(
    settings: Settings, world: TenantWorld
) -> None:
    """As REST's batches: ceil(250 / 100) = 3 of the key's 25, with the in-process limiter on a
    clock that stands still, so a slow batch refills nothing between its two charges."""
    with serving(settings, clock=FakeClock(), redis_url=None, **slow_limits(25, 1000)) as served:
        response = served.post(
            "/graphql",
            json={
                "query": BATCH_CUSTOMERS,
                "variables": {"operations": [create() for _ in range(250)]},
            },
            headers=world.key.headers,
        )

    assert response.status_code == 200, response.text
    assert "errors" not in response.json()
    assert state(response) == State("key", 22, 15)
