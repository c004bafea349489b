"""The sync mutations every synced record has (upsert<Record>, batch<Record>s), as each answers
them alike: a tenant-wide key names the department it writes in, before anything else is
judged or written."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.tenancy.database.connections import Database
from tests.graphql_api.support import gql, tenant_wide_headers
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
