"""upsertDeal, batchDeals, upsertActivity and batchActivities: the deals' and activities' sync
services over GraphQL, as test_sync_mutations tests the customers'."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.graphql_api.support import (
    SyncMutations,
    data_of,
    external_ids,
    field_errors,
    gql,
    only_error,
)
from tests.support import TenantWorld

API = "/api/v1/integration"

DEAL = SyncMutations(
    "Deal",
    "DealUpsertInput",
    "name",
    "volume stepId employeeId customers { lastName }",
    data_under_op=True,
)
ACTIVITY = SyncMutations(
    "Activity", "ActivityInput", "subject", "type note customerId", irregular_plural="Activities"
)
UPSERT_DEAL, BATCH_DEALS = DEAL.upsert_document, DEAL.batch_document
deal_upsert, deal_create = DEAL.upsert_operation, DEAL.create_operation
UPSERT_ACTIVITY, BATCH_ACTIVITIES = ACTIVITY.upsert_document, ACTIVITY.batch_document


def steps_of(client: TestClient, world: TenantWorld) -> list[str]:
    steps = client.get(f"{API}/steps", headers=world.key.headers).json()["data"]
    return [step["id"] for step in steps]


# --- deals ---------------------------------------------------------------------------------


def test_a_deal_upsert_starts_in_the_first_step_then_moves_and_assigns_it(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    headers = world.key.headers
    first, second, *_ = steps_of(client, world)
    employee = admin.create_employee(database, world.tenant.id, world.department.id, "Eve", None)

    created = DEAL.upsert(client, headers, "erp-1", volume=100)
    updated = DEAL.upsert(client, headers, "erp-1", stepId=second, employeeId=str(employee.id))
    unchanged = DEAL.upsert(client, headers, "erp-1", stepId=second)

    assert created["outcome"] == "CREATED"
    deal = created["deal"]
    assert (deal["externalId"], deal["stepId"], deal["volume"], deal["version"]) == (
        "erp-1",
        first,
        100,
        1,
    )
    assert updated["outcome"] == "UPDATED"
    assert updated["deal"]["id"] == deal["id"]
    assert (updated["deal"]["stepId"], updated["deal"]["employeeId"]) == (second, str(employee.id))
    # Absent fields stay as they are.
    assert updated["deal"]["volume"] == 100
    assert unchanged["outcome"] == "UNCHANGED"
    assert unchanged["deal"]["version"] == updated["deal"]["version"]
    assert client.get(f"{API}/deals/{deal['id']}", headers=headers).json()["step_id"] == second


def test_a_deal_batch_creates_deals_with_new_customers_and_changes_others(
    client: TestClient, world: TenantWorld
) -> None:
    """A batch's failed operations, a deal's own rules among them, are in test_record_sync."""
    headers = world.key.headers
    DEAL.upsert(client, headers, "kept", volume=1)
    operations = [
        deal_create(externalId="c", customers=[{"lastName": "Ada"}]),
        deal_upsert("kept", volume=2),
    ]

    found = data_of(client, BATCH_DEALS, {"operations": operations}, headers)["batchDeals"]

    results = found["results"]
    assert [r["outcome"] for r in results] == ["CREATED", "UPDATED"]
    assert results[0]["deal"]["customers"] == [{"lastName": "Ada"}]
    assert (results[1]["deal"]["volume"], results[1]["deal"]["version"]) == (2, 2)
    assert found["summary"] == {"created": 1, "updated": 1, "unchanged": 0, "failed": 0}
    assert external_ids(client, world, "deals") == ["kept", "c"]


def test_an_atomic_deal_batch_with_a_failure_writes_nothing(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    DEAL.upsert(client, headers, "taken")

    invalid = DEAL.batch(client, headers, [deal_upsert("a"), deal_create(volume=-1)], atomic=True)
    failing = DEAL.batch(
        client,
        headers,
        [
            deal_upsert("a"),
            deal_create(customers=[{"lastName": "Ada"}]),
            deal_upsert("b", stepId=str(uuid.uuid4())),
        ],
        atomic=True,
    )

    error = only_error(invalid)
    assert error["extensions"]["code"] == "batch_rejected"
    [failure] = error["extensions"]["failures"]
    assert (failure["index"], failure["code"]) == (1, "validation_failed")
    assert field_errors(failure["errors"]) == [("operations[1].create.volume", "out_of_range")]
    error = only_error(failing)
    assert error["extensions"]["code"] == "batch_rejected"
    [failure] = error["extensions"]["failures"]
    assert failure["index"] == 2
    assert field_errors(failure["errors"]) == [("operations[2].upsert.stepId", "not_found")]
    assert external_ids(client, world, "deals") == ["taken"]
    assert client.get(f"{API}/customers", headers=headers).json()["data"] == []


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        (
            {"op": "UPSERT", "externalId": "a", "create": {"name": "D"}},
            [("operations[0].upsert", "missing"), ("operations[0].create", "unknown_field")],
        ),
        (
            {"op": "CREATE", "create": {"name": "D"}, "upsert": {"name": "D"}},
            [("operations[0].upsert", "unknown_field")],
        ),
        ({"op": "UPSERT", "upsert": {"name": "D"}}, [("operations[0]", "missing")]),
    ],
    ids=["upsert-in-create", "both", "upsert-without-external-id"],
)
def test_a_malformed_deal_batch_is_refused_whole(
    client: TestClient,
    world: TenantWorld,
    operation: dict[str, Any],
    expected: list[tuple[str, str]],
) -> None:
    error = only_error(DEAL.batch(client, world.key.headers, [deal_upsert("ok"), operation]))

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [
        (field.replace("[0]", "[1]"), code) for field, code in expected
    ]
    assert external_ids(client, world, "deals") == []


# --- activities ----------------------------------------------------------------------------


def new_customer(client: TestClient, world: TenantWorld) -> str:
    response = client.post(f"{API}/customers", json={"last_name": "C"}, headers=world.key.headers)
    customer_id: str = response.json()["id"]
    return customer_id


def test_an_activity_batch_reports_each_operation_and_an_atomic_one_writes_nothing(
    client: TestClient, world: TenantWorld
) -> None:
    customer_id = new_customer(client, world)

    def operation(op: str, external_id: str | None = None, **fields: Any) -> dict[str, Any]:
        found: dict[str, Any] = {
            "op": op,
            "data": {"type": "CALL", "customerId": customer_id, **fields},
        }
        if external_id is not None:
            found["externalId"] = external_id
        return found

    failing = [
        operation("UPSERT", "a"),
        operation("UPSERT", "b", dealId=str(uuid.uuid4())),
        operation("CREATE", externalId="c"),
    ]

    atomic = gql(
        client, BATCH_ACTIVITIES, {"operations": failing, "atomic": True}, world.key.headers
    )
    written_atomically = external_ids(client, world, "activities")
    body = data_of(client, BATCH_ACTIVITIES, {"operations": failing}, world.key.headers)

    error = only_error(atomic)
    assert error["extensions"]["code"] == "batch_rejected"
    [failure] = error["extensions"]["failures"]
    assert failure["index"] == 1
    assert field_errors(failure["errors"]) == [("operations[1].data.dealId", "not_found")]
    assert written_atomically == []
    results = body["batchActivities"]["results"]
    assert [r["outcome"] for r in results] == ["CREATED", "FAILED", "CREATED"]
    assert field_errors(results[1]["error"]["errors"]) == [
        ("operations[1].data.dealId", "not_found")
    ]
    assert results[1]["activity"] is None
    assert body["batchActivities"]["summary"] == {
        "created": 2,
        "updated": 0,
        "unchanged": 0,
        "failed": 1,
    }
    assert external_ids(client, world, "activities") == ["a", "c"]


# --- scoping (the rules every record answers alike are in test_record_sync) ---------------


def test_an_activity_cannot_name_another_tenants_customer(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    home, other = make_tenant(), make_tenant()
    customer_id = new_customer(client, home)
    variables = {"externalId": "task-1", "input": {"type": "CALL", "customerId": customer_id}}
    ACTIVITY.upsert(client, home.key.headers, "task-1", customerId=customer_id, type="CALL")

    foreign = gql(client, UPSERT_ACTIVITY, variables, other.key.headers)

    # It does not exist for their key.
    assert field_errors(only_error(foreign)["extensions"]["errors"]) == [
        ("customerId", "not_found")
    ]
