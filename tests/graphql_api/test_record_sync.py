"""The sync mutations every synced record has (upsert<Record>, batch<Record>s), as each answers
them alike: an upsert's outcomes, and a tenant-wide key naming the department it writes in
before anything else is judged or written. What is particular to one record is in
test_sync_mutations (customers) and test_sync_deals_and_activities."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.graphql_api.support import data_of, gql, tenant_wide_headers
from tests.graphql_api.test_sync_deals_and_activities import (
    BATCH_ACTIVITIES,
    BATCH_DEALS,
    UPSERT_ACTIVITY,
    UPSERT_DEAL,
    deal_upsert,
)
from tests.graphql_api.test_sync_mutations import BATCH_CUSTOMERS, UPSERT_CUSTOMER, create, upsert
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
    """A synced record as its upsert mutation takes it: ``label`` and ``other`` are two of its
    optional or changeable fields (GraphQL's names), ``required`` the rest of a valid input in the
    department of the headers."""

    name: str  # "Customer": upsertCustomer, CustomerInput, the field customer
    input_type: str
    plural: str  # its REST path
    label: str
    other: tuple[str, Any]
    required: Callable[[TestClient, dict[str, str]], dict[str, Any]] = lambda client, headers: {}

    def upsert(
        self, client: TestClient, headers: dict[str, str], external_id: str, **fields: Any
    ) -> dict[str, Any]:
        field = self.name[0].lower() + self.name[1:]
        document = f"""
        mutation ($externalId: String!, $input: {self.input_type}!) {{
          upsert{self.name}(externalId: $externalId, input: $input) {{
            outcome
            {field} {{ id externalId departmentId version {self.label} {self.other[0]} }}
          }}
        }}
        """
        variables = {"externalId": external_id, "input": fields}
        answer: dict[str, Any] = data_of(client, document, variables, headers)[f"upsert{self.name}"]
        return {"outcome": answer["outcome"], **answer[field]}


def _a_customer(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    response = client.post(f"{API}/customers", json={"last_name": "C"}, headers=headers)
    return {"type": "CALL", "customerId": response.json()["id"]}


SYNCED = {
    "customers": SyncedGraphQL(
        "Customer", "CustomerInput", "customers", "lastName", ("city", "London")
    ),
    "deals": SyncedGraphQL("Deal", "DealUpsertInput", "deals", "name", ("volume", 100)),
    "activities": SyncedGraphQL(
        "Activity",
        "ActivityInput",
        "activities",
        "subject",
        ("note", "Bring the drawings"),
        _a_customer,
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
