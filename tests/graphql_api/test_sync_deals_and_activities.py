"""upsertDeal, batchDeals, upsertActivity and batchActivities: the deals' and activities' sync
services over GraphQL, as test_sync_mutations tests the customers'."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.graphql_api.support import codes_of, data_of, gql, tenant_wide_headers
from tests.support import TenantWorld

API = "/api/v1/integration"

UPSERT_DEAL = """
mutation ($externalId: String!, $input: DealUpsertInput!, $d: UUID) {
  upsertDeal(externalId: $externalId, input: $input, departmentId: $d) {
    outcome
    deal { id externalId departmentId name volume stepId employeeId version customers { lastName } }
  }
}
"""
BATCH_DEALS = """
mutation ($operations: [DealOperationInput!]!, $atomic: Boolean! = false, $d: UUID) {
  batchDeals(operations: $operations, atomic: $atomic, departmentId: $d) {
    results {
      index outcome
      deal { id externalId name volume version customers { lastName } }
      error { code message errors { field code message } }
    }
    summary { created updated unchanged failed }
  }
}
"""
UPSERT_ACTIVITY = """
mutation ($externalId: String!, $input: ActivityInput!, $d: UUID) {
  upsertActivity(externalId: $externalId, input: $input, departmentId: $d) {
    outcome
    activity { id externalId departmentId type subject customerId version }
  }
}
"""
BATCH_ACTIVITIES = """
mutation ($operations: [ActivityOperationInput!]!, $atomic: Boolean! = false, $d: UUID) {
  batchActivities(operations: $operations, atomic: $atomic, departmentId: $d) {
    results {
      index outcome
      activity { id externalId type subject version }
      error { code message errors { field code message } }
    }
    summary { created updated unchanged failed }
  }
}
"""


def only_error(body: dict[str, Any]) -> dict[str, Any]:
    assert body["data"] is None, body
    (error,) = body["errors"]
    found: dict[str, Any] = error
    return found


def field_errors(errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["field"], item["code"]) for item in errors]


def listed(client: TestClient, world: TenantWorld, resource: str) -> list[str | None]:
    """The external ids of the department's deals or activities, as REST lists them."""
    response = client.get(f"{API}/{resource}", params={"limit": 100}, headers=world.key.headers)
    return [record["external_id"] for record in response.json()["data"]]


def steps_of(client: TestClient, world: TenantWorld) -> list[str]:
    steps = client.get(f"{API}/steps", headers=world.key.headers).json()["data"]
    return [step["id"] for step in steps]


# --- deals ---------------------------------------------------------------------------------


def upsert_deal(
    client: TestClient, headers: dict[str, str], external_id: str, **fields: Any
) -> dict[str, Any]:
    variables = {"externalId": external_id, "input": {"name": "D", **fields}}
    found: dict[str, Any] = data_of(client, UPSERT_DEAL, variables, headers)["upsertDeal"]
    return found


def deal_upsert(external_id: str, **data: Any) -> dict[str, Any]:
    return {"op": "UPSERT", "externalId": external_id, "upsert": {"name": "D", **data}}


def deal_create(**data: Any) -> dict[str, Any]:
    return {"op": "CREATE", "create": {"name": "D", **data}}


def batch_deals(
    client: TestClient, headers: dict[str, str], operations: list[dict[str, Any]], **variables: Any
) -> dict[str, Any]:
    return gql(client, BATCH_DEALS, {"operations": operations, **variables}, headers)


def test_a_deal_upsert_starts_in_the_first_step_then_moves_and_assigns_it(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    headers = world.key.headers
    first, second, *_ = steps_of(client, world)
    employee = admin.create_employee(database, world.tenant.id, world.department.id, "Eve", None)

    created = upsert_deal(client, headers, "erp-1", volume=100)
    updated = upsert_deal(client, headers, "erp-1", stepId=second, employeeId=str(employee.id))
    unchanged = upsert_deal(client, headers, "erp-1", stepId=second)

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


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"stepId": None}, [("stepId", "cannot_clear")]),
        ({"stepId": str(uuid.uuid4())}, [("stepId", "not_found")]),
        ({"volume": -1}, [("volume", "out_of_range")]),
        ({"externalId": "erp-2"}, [("externalId", "mismatch")]),
    ],
    ids=["null-step", "unknown-step", "negative-volume", "other-external-id"],
)
def test_an_invalid_deal_upsert_names_its_fields_and_writes_nothing(
    client: TestClient, world: TenantWorld, fields: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    variables = {"externalId": "erp-1", "input": {"name": "D", **fields}}

    error = only_error(gql(client, UPSERT_DEAL, variables, world.key.headers))

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == expected
    assert listed(client, world, "deals") == []


def test_a_deal_batch_reports_each_operation_and_names_fields_in_create_or_upsert(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    upsert_deal(client, headers, "taken")
    upsert_deal(client, headers, "kept", volume=1)
    operations = [
        deal_upsert("a"),
        deal_create(externalId="taken"),
        deal_upsert("b", stepId=str(uuid.uuid4())),
        deal_create(externalId="c", customers=[{"lastName": "Ada"}]),
        deal_upsert("kept", volume=2),
        deal_create(customers=[{"lastName": " "}]),
    ]

    body = batch_deals(client, headers, operations)

    assert "errors" not in body, body["errors"]
    found = body["data"]["batchDeals"]
    results = found["results"]
    assert [r["outcome"] for r in results] == [
        "CREATED",
        "FAILED",
        "FAILED",
        "CREATED",
        "UPDATED",
        "FAILED",
    ]
    assert (results[1]["error"]["code"], results[1]["error"]["errors"]) == (
        "external_id_taken",
        [],
    )
    assert field_errors(results[2]["error"]["errors"]) == [
        ("operations[2].upsert.stepId", "not_found")
    ]
    assert field_errors(results[5]["error"]["errors"]) == [
        ("operations[5].create.customers[0].lastName", "blank")
    ]
    assert results[3]["deal"]["customers"] == [{"lastName": "Ada"}]
    assert (results[4]["deal"]["volume"], results[4]["deal"]["version"]) == (2, 2)
    assert [r["deal"] is None for r in results] == [False, True, True, False, False, True]
    assert found["summary"] == {"created": 2, "updated": 1, "unchanged": 0, "failed": 3}
    assert listed(client, world, "deals") == ["taken", "kept", "a", "c"]


def test_an_atomic_deal_batch_with_a_failure_writes_nothing(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    upsert_deal(client, headers, "taken")

    invalid = batch_deals(client, headers, [deal_upsert("a"), deal_create(volume=-1)], atomic=True)
    failing = batch_deals(
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
    assert listed(client, world, "deals") == ["taken"]
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
    error = only_error(batch_deals(client, world.key.headers, [deal_upsert("ok"), operation]))

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [
        (field.replace("[0]", "[1]"), code) for field, code in expected
    ]
    assert listed(client, world, "deals") == []


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
    written_atomically = listed(client, world, "activities")
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
    assert listed(client, world, "activities") == ["a", "c"]


# --- scoping -------------------------------------------------------------------------------


def test_a_tenant_wide_key_syncs_deals_and_activities_in_the_department_it_names(
    client: TestClient, database: Database, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    wide = tenant_wide_headers(database, world)
    second = str(world.departments[1].id)
    customer = client.post(
        f"{API}/customers", json={"last_name": "C"}, headers=world.keys[1].headers
    ).json()

    deal = data_of(
        client, UPSERT_DEAL, {"externalId": "w", "input": {"name": "W"}, "d": second}, wide
    )["upsertDeal"]["deal"]
    activity = data_of(
        client,
        UPSERT_ACTIVITY,
        {
            "externalId": "w",
            "input": {"type": "NOTE", "customerId": customer["id"], "dealId": deal["id"]},
            "d": second,
        },
        wide,
    )["upsertActivity"]["activity"]

    assert (deal["departmentId"], activity["departmentId"]) == (second, second)
    owner, bystander = world.keys[1].headers, world.keys[0].headers
    for path in (f"{API}/deals/{deal['id']}", f"{API}/activities/{activity['id']}"):
        assert client.get(path, headers=owner).status_code == 200
        assert client.get(path, headers=bystander).status_code == 404


def test_deal_and_activity_external_ids_belong_to_their_tenant(
    client: TestClient, make_tenant: Any
) -> None:
    home: TenantWorld = make_tenant()
    other: TenantWorld = make_tenant()
    mine = upsert_deal(client, home.key.headers, "erp-1", volume=1)
    customer_id = new_customer(client, home)
    activity = data_of(
        client,
        UPSERT_ACTIVITY,
        {"externalId": "task-1", "input": {"type": "CALL", "customerId": customer_id}},
        home.key.headers,
    )["upsertActivity"]["activity"]

    theirs = batch_deals(client, other.key.headers, [deal_upsert("erp-1", volume=2)])
    foreign_activity = gql(
        client,
        UPSERT_ACTIVITY,
        {"externalId": "task-1", "input": {"type": "CALL", "customerId": customer_id}},
        other.key.headers,
    )
    seen_deal = gql(
        client,
        "query ($id: UUID!) { deal(id: $id) { id } }",
        {"id": mine["deal"]["id"]},
        other.key.headers,
    )
    seen_activity = gql(
        client,
        "query ($id: UUID!) { activity(id: $id) { id } }",
        {"id": activity["id"]},
        other.key.headers,
    )

    (result,) = theirs["data"]["batchDeals"]["results"]
    assert result["outcome"] == "CREATED"
    assert result["deal"]["id"] != mine["deal"]["id"]
    # Their key cannot name our customer: it does not exist for them.
    assert [
        (e["field"], e["code"]) for e in only_error(foreign_activity)["extensions"]["errors"]
    ] == [("customerId", "not_found")]
    assert codes_of(seen_deal) == codes_of(seen_activity) == ["not_found"]
    again = upsert_deal(client, home.key.headers, "erp-1", volume=1)
    assert (again["outcome"], again["deal"]["version"]) == ("UNCHANGED", 1)
