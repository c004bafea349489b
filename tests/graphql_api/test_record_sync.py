"""The sync mutations every synced record has (upsert<Record>, batch<Record>s), as each answers
them alike: an upsert's outcomes, its invalid input named by field, a batch's failed operations
(each record's own rules among them) beside the written ones, a tenant-wide key naming
the department it writes in (before anything else is judged or written), and an external id's
reach (one department of one tenant). What is particular to one record is in
test_sync_mutations (customers) and test_sync_deals_and_activities."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.graphql_api.support import (
    SyncMutations,
    codes_of,
    data_of,
    external_ids,
    field_errors,
    gql,
    only_error,
    tenant_wide_headers,
)
from tests.graphql_api.test_sync_deals_and_activities import (
    ACTIVITY,
    BATCH_ACTIVITIES,
    BATCH_DEALS,
    DEAL,
    UPSERT_ACTIVITY,
    UPSERT_DEAL,
    deal_upsert,
)
from tests.graphql_api.test_sync_mutations import (
    BATCH_CUSTOMERS,
    CUSTOMER,
    UPSERT_CUSTOMER,
    create,
    upsert,
)
from tests.support import TenantWorld

API = "/api/v1/integration"
# No customer has it: the department is asked for before a reference is looked at.
CUSTOMER_ID = "00000000-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    ("document", "variables", "listed"),
    [
        (UPSERT_CUSTOMER, {"externalId": "wide", "input": {"lastName": "W"}}, "customers"),
        (BATCH_CUSTOMERS, {"operations": [upsert("wide")]}, "customers"),
        # The department is asked for first, whatever else the batch holds.
        (BATCH_CUSTOMERS, {"operations": [create(email="bad")], "atomic": True}, "customers"),
        (UPSERT_DEAL, {"externalId": "wide", "input": {"name": "W"}}, "deals"),
        (BATCH_DEALS, {"operations": [deal_upsert("wide")]}, "deals"),
        (
            UPSERT_ACTIVITY,
            {"externalId": "wide", "input": {"type": "CALL", "customerId": CUSTOMER_ID}},
            "activities",
        ),
        (
            BATCH_ACTIVITIES,
            {"operations": [{"op": "CREATE", "data": {"type": "CALL", "customerId": CUSTOMER_ID}}]},
            "activities",
        ),
    ],
    ids=[
        "upsertCustomer",
        "batchCustomers",
        "batchCustomers-invalid",
        "upsertDeal",
        "batchDeals",
        "upsertActivity",
        "batchActivities",
    ],
)
def test_a_tenant_wide_key_must_name_a_department(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    document: str,
    variables: dict[str, Any],
    listed: str,
) -> None:
    body = gql(client, document, variables, tenant_wide_headers(database, world))

    assert body["data"] is None, body
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "validation_failed"
    assert [(e["field"], e["code"]) for e in error["extensions"]["errors"]] == [
        ("departmentId", "missing")
    ]
    written = client.get(f"{API}/{listed}", headers=world.key.headers).json()["data"]
    assert written == []


@dataclass(frozen=True)
class SyncedGraphQL:
    """A synced record as its upsert mutation takes it: ``other`` is an optional or changeable
    field beside its label (GraphQL's names), ``required`` the rest of a valid input in the
    department of the headers."""

    mutations: SyncMutations
    plural: str  # its REST path
    other: tuple[str, Any]
    required: Callable[[TestClient, dict[str, str]], dict[str, Any]] = lambda client, headers: {}
    # What fails one operation of a batch by this record's own rules: the operation (UPSERT,
    # CREATE), the fields it adds to a valid input, and the field and code its failure names.
    own_failures: tuple[tuple[str, dict[str, Any], str, str], ...] = ()

    @property
    def label(self) -> str:
        return self.mutations.label

    def upsert(
        self, client: TestClient, headers: dict[str, str], external_id: str, **fields: Any
    ) -> dict[str, Any]:
        """The upsert's outcome, and the record as it answers it."""
        answer = self.mutations.upsert(client, headers, external_id, **fields)
        return {"outcome": answer["outcome"], **answer[self.mutations.field]}


def _a_customer_and_a_deal(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    """What an activity names, in the department of ``headers``: its customer, and a deal."""
    customer = client.post(f"{API}/customers", json={"last_name": "C"}, headers=headers)
    deal = client.post(f"{API}/deals", json={"name": "D"}, headers=headers)
    return {"type": "CALL", "customerId": customer.json()["id"], "dealId": deal.json()["id"]}


SYNCED = {
    "customers": SyncedGraphQL(
        CUSTOMER,
        "customers",
        ("city", "London"),
        own_failures=(
            ("CREATE", {"email": "not an email"}, "email", "invalid_format"),
            ("UPSERT", {"firstName": "x" * 256}, "firstName", "too_long"),
        ),
    ),
    "deals": SyncedGraphQL(
        DEAL,
        "deals",
        ("volume", 100),
        own_failures=(
            ("UPSERT", {"stepId": str(uuid.uuid4())}, "stepId", "not_found"),
            ("CREATE", {"customers": [{"lastName": " "}]}, "customers[0].lastName", "blank"),
        ),
    ),
    "activities": SyncedGraphQL(
        ACTIVITY,
        "activities",
        ("note", "Bring the drawings"),
        _a_customer_and_a_deal,
        own_failures=(("UPSERT", {"dealId": str(uuid.uuid4())}, "dealId", "not_found"),),
    ),
}


@pytest.mark.parametrize("plural", sorted(SYNCED))
def test_an_upsert_creates_then_changes_only_the_fields_it_gives_then_leaves_unchanged(
    client: TestClient, world: TenantWorld, plural: str
) -> None:
    record = SYNCED[plural]
    headers = world.key.headers
    required = record.required(client, headers)
    other, value = record.other

    created = record.upsert(
        client, headers, "sync-1", **required, **{record.label: "A", other: value}
    )
    updated = record.upsert(client, headers, "sync-1", **required, **{record.label: "B"})
    unchanged = record.upsert(client, headers, "sync-1", **required, **{record.label: "B"})

    assert created["outcome"] == "CREATED"
    assert (created["externalId"], created["departmentId"], created["version"]) == (
        "sync-1",
        str(world.department.id),
        1,
    )
    assert (created[record.label], created[other]) == ("A", value)
    assert updated["outcome"] == "UPDATED"
    assert (updated["id"], updated["version"], updated[record.label]) == (created["id"], 2, "B")
    # Absent fields stay as they are.
    assert updated[other] == value
    assert unchanged == {**updated, "outcome": "UNCHANGED"}
    rest = client.get(f"{API}/{record.plural}/{created['id']}", headers=headers)
    assert rest.headers["etag"] == '"2"'


@pytest.mark.parametrize(
    ("plural", "external_id", "fields", "expected"),
    [
        ("customers", "a b", {}, [("externalId", "invalid_format")]),
        ("customers", "crm-1", {"externalId": "crm-2"}, [("externalId", "mismatch")]),
        ("customers", "crm-1", {"email": "not an email"}, [("email", "invalid_format")]),
        ("customers", "crm-1", {"lastName": " "}, [("lastName", "blank")]),
        ("deals", "erp-1", {"stepId": None}, [("stepId", "cannot_clear")]),
        ("deals", "erp-1", {"stepId": str(uuid.uuid4())}, [("stepId", "not_found")]),
        ("deals", "erp-1", {"volume": -1}, [("volume", "out_of_range")]),
        ("deals", "erp-1", {"externalId": "erp-2"}, [("externalId", "mismatch")]),
    ],
    ids=[
        "customer-bad-external-id",
        "customer-other-external-id",
        "customer-bad-email",
        "customer-blank-last-name",
        "deal-null-step",
        "deal-unknown-step",
        "deal-negative-volume",
        "deal-other-external-id",
    ],
)
def test_an_invalid_upsert_names_its_fields_and_writes_nothing(
    client: TestClient,
    world: TenantWorld,
    plural: str,
    external_id: str,
    fields: dict[str, Any],
    expected: list[tuple[str, str]],
) -> None:
    mutations = SYNCED[plural].mutations
    variables = {"externalId": external_id, "input": {mutations.label: "L", **fields}}

    error = only_error(gql(client, mutations.upsert_document, variables, world.key.headers))

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == expected
    assert error["path"] == [f"upsert{mutations.record}"]
    assert external_ids(client, world, plural) == []


@pytest.mark.parametrize("plural", sorted(SYNCED))
def test_a_tenant_wide_key_writes_in_the_department_it_names(
    client: TestClient, database: Database, make_tenant: Callable[..., TenantWorld], plural: str
) -> None:
    record = SYNCED[plural]
    mutations = record.mutations
    world = make_tenant(departments=2)
    wide = tenant_wide_headers(database, world)
    owner, bystander = world.keys[1].headers, world.keys[0].headers
    second = str(world.departments[1].id)
    # The references an activity names are the named department's.
    fields = {**record.required(client, owner), mutations.label: "W"}

    upserted = data_of(
        client,
        mutations.upsert_document,
        {"externalId": "wide", "input": fields, "d": second},
        wide,
    )[f"upsert{mutations.record}"][mutations.field]
    batched = data_of(
        client,
        mutations.batch_document,
        {"operations": [mutations.upsert_operation("wide", **fields)], "d": second},
        wide,
    )[f"batch{mutations.plural}"]

    assert upserted["departmentId"] == second
    assert [result["outcome"] for result in batched["results"]] == ["UNCHANGED"]
    path = f"{API}/{record.plural}/{upserted['id']}"
    assert client.get(path, headers=owner).status_code == 200
    assert client.get(path, headers=bystander).status_code == 404


@pytest.mark.parametrize("plural", sorted(SYNCED))
def test_an_external_id_names_a_record_of_one_department_of_one_tenant(
    client: TestClient, make_tenant: Callable[..., TenantWorld], plural: str
) -> None:
    record = SYNCED[plural]
    mutations = record.mutations
    home, other = make_tenant(departments=2), make_tenant()
    mine_headers, neighbour_headers = home.keys[0].headers, home.keys[1].headers

    def fields(headers: dict[str, str], label: str) -> dict[str, Any]:
        return {**record.required(client, headers), mutations.label: label}

    own = fields(mine_headers, "Home")
    mine = record.upsert(client, mine_headers, "sync-1", **own)

    neighbour = record.upsert(
        client, neighbour_headers, "sync-1", **fields(neighbour_headers, "Next door")
    )
    foreign = mutations.batch(
        client,
        other.key.headers,
        [mutations.upsert_operation("sync-1", **fields(other.key.headers, "Abroad"))],
    )
    seen = gql(
        client,
        f"query ($id: UUID!) {{ {mutations.field}(id: $id) {{ id }} }}",
        {"id": mine["id"]},
        other.key.headers,
    )

    assert neighbour["outcome"] == "CREATED"
    assert neighbour["id"] != mine["id"]
    (result,) = foreign["data"][f"batch{mutations.plural}"]["results"]
    assert result["outcome"] == "CREATED"
    assert result[mutations.field]["id"] != mine["id"]
    assert codes_of(seen) == ["not_found"]
    # The first is as its own department left it.
    again = record.upsert(client, mine_headers, "sync-1", **own)
    assert (again["outcome"], again["version"]) == ("UNCHANGED", 1)


@pytest.mark.parametrize("plural", sorted(SYNCED))
def test_by_default_a_failed_operation_of_a_batch_leaves_the_others_written(
    client: TestClient, world: TenantWorld, plural: str
) -> None:
    record = SYNCED[plural]
    mutations = record.mutations
    headers = world.key.headers
    required = record.required(client, headers)
    for external_id in ("taken", "kept"):
        record.upsert(client, headers, external_id, **required)
    own = record.own_failures

    def own_failure(n: int, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        data = {**required, **fields}  # the failing fields in place of the valid ones
        if op == "CREATE":
            return mutations.create_operation(**data)
        return mutations.upsert_operation(f"own-{n}", **data)

    body = mutations.batch(
        client,
        headers,
        [
            mutations.upsert_operation("a", **required),
            mutations.create_operation(**required, externalId="taken"),
            mutations.upsert_operation("a", **required, **{record.label: "Twice"}),
            mutations.upsert_operation("kept", **required, **{record.label: "Changed"}),
            mutations.create_operation(**required, externalId="c"),
            *(own_failure(n, op, fields) for n, (op, fields, _, _) in enumerate(own)),
        ],
    )

    assert "errors" not in body, body["errors"]
    found = body["data"][f"batch{mutations.plural}"]
    results = found["results"]
    assert [r["outcome"] for r in results] == [
        "CREATED",
        "FAILED",
        "FAILED",
        "UPDATED",
        "CREATED",
        *["FAILED"] * len(own),
    ]
    assert [r[mutations.field] is None for r in results] == [
        False,
        True,
        True,
        False,
        False,
        *[True] * len(own),
    ]
    assert (results[1]["error"]["code"], results[1]["error"]["errors"]) == ("external_id_taken", [])
    assert field_errors(results[2]["error"]["errors"]) == [
        ("operations[2].externalId", "duplicate_item")
    ]
    assert results[3][mutations.field][record.label] == "Changed"
    for index, (op, _, field, code) in enumerate(own, start=5):
        error = results[index]["error"]
        assert (error["code"], bool(error["message"])) == ("validation_failed", True), field
        assert field_errors(error["errors"]) == [
            (f"operations[{index}].{mutations.data_key(op)}.{field}", code)
        ]
    assert found["summary"] == {"created": 2, "updated": 1, "unchanged": 0, "failed": 2 + len(own)}
    assert external_ids(client, world, plural) == ["taken", "kept", "a", "c"]
