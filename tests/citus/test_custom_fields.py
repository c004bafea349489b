"""A custom field of a tenant on a distributed schema: its column and its unique index are made
through the coordinator and hold on the worker that keeps the schema; deleting it drops both.
A deal's create writes its and its new customers' values by statements Citus routes whole."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.models import CustomFieldFields
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate
from dealbase.platform.tables import events
from dealbase.platform.validation import validated
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
from tests.citus.plans import assert_routed_whole, statements_sent
from tests.support import TenantWorld

CONTRACT = {
    "record": "customer",
    "name": "contract",
    "label": "Contract",
    "type": "text",
    "unique": True,
}


@pytest.fixture
def changes(citus_url: str) -> Iterator[SchemaChanges]:
    made = SchemaChanges(citus_url, TENANT_OWNER_ROLE)
    yield made
    made.dispose()


def _worker_columns(citus_url: str, schema: str) -> list[str]:
    """The custom columns of the schema's customers, as each worker's catalog has them."""
    query = (
        "SELECT string_agg(attname, ',' ORDER BY attname) FROM pg_attribute"
        f" WHERE attrelid = to_regclass('{schema}.customers') AND attname LIKE 'cf\\_%%'"
        " AND NOT attisdropped"
    )
    with psycopg.connect(citus_url) as connection:
        rows = connection.execute(
            "SELECT result FROM run_command_on_workers(%s) WHERE success", [query]
        ).fetchall()
    return [row[0] for row in rows if row[0]]


def test_a_unique_field_holds_on_the_worker_and_goes_with_its_column(
    cluster_database: Database,
    cluster_world: TenantWorld,
    citus_url: str,
    changes: SchemaChanges,
) -> None:
    scope = cluster_world.tenant.scope
    schema = scope.schema
    field = asyncio.run(service.define(changes, scope, validated(CustomFieldFields, CONTRACT)))
    with cluster_database.unit_of_work(scope.in_department(cluster_world.department.id)) as uow:
        first = customers.create(uow, CustomerFields(last_name="Lovelace")).id
        second = customers.create(uow, CustomerFields(last_name="Hopper")).id

    # Every worker's catalog has the table (a shard on one, its metadata on the others).
    assert set(_worker_columns(citus_url, schema)) == {"cf_contract"}
    with psycopg.connect(citus_url, autocommit=True) as connection:
        update = f'UPDATE "{schema}".customers SET cf_contract = %s WHERE id = %s'
        connection.execute(update, ["C-1", first])
        with pytest.raises(psycopg.errors.UniqueViolation):
            connection.execute(update, ["C-1", second])

    asyncio.run(service.change(changes, scope, field.id, {"archived": True}, None))
    asyncio.run(service.delete(changes, scope, field.id, None))

    assert _worker_columns(citus_url, schema) == []


@pytest.mark.parametrize("as_json", [True, False], ids=["REST", "GraphQL"])
def test_a_deal_create_writes_its_and_its_customers_custom_values_by_statements_routed_whole(
    cluster_database: Database,
    cluster_world: TenantWorld,
    citus_url: str,
    changes: SchemaChanges,
    monkeypatch: pytest.MonkeyPatch,
    as_json: bool,
) -> None:
    scope = cluster_world.tenant.scope
    for definition in (
        {"record": "deal", "name": "seats", "label": "Seats", "type": "decimal"},
        {"record": "customer", "name": "ref", "label": "Ref", "type": "text"},
    ):
        asyncio.run(service.define(changes, scope, validated(CustomFieldFields, definition)))
    fields = validated(
        DealCreate,
        {
            "name": "Engine",
            "custom_fields": {"seats": "2.50"},
            "customers": [{"last_name": "Ada", "custom_fields": {"ref": "R-1"}}],
        },
    )
    department = scope.in_department(cluster_world.department.id)

    with statements_sent(monkeypatch) as sent, cluster_database.unit_of_work(department) as uow:
        if as_json:
            answered = deals.create_later_as_json(uow, fields)
        else:
            created = deals.RECORD.fitted(uow).as_json(deals.create(uow, fields))
    if as_json:
        *_, text = answered.read()
        created = json.loads(text)

    assert_routed_whole(citus_url, sent)
    with cluster_database.unit_of_work(department) as uow:
        deal = deals.RECORD.fitted(uow).as_json(deals.RECORD.get(uow, uuid.UUID(created["id"])))
        customer_id = uuid.UUID(deal["customers"][0]["id"])
        customer = customers.RECORD.fitted(uow).as_json(customers.RECORD.get(uow, customer_id))
        recorded = uow.connection.execute(
            select(events.c.type, events.c.data).order_by(events.c.sequence, events.c.id)
        ).all()
    assert created == deal
    assert deal["custom_fields"] == {"seats": "2.50"}
    assert customer["custom_fields"] == {"ref": "R-1"}
    assert [tuple(row) for row in recorded] == [
        ("customer.created", customer),
        ("deal.created", deal),
    ]


def test_customers_carry_filter_and_upsert_by_their_custom_values_on_the_cluster(
    cluster_client_either_way: TestClient,
    cluster_world: TenantWorld,
    changes: SchemaChanges,
) -> None:
    """Through the app: a create, a PATCH, a batch upserting by a unique field (the routed
    writes) and a filtered list, each way the app reaches the cluster."""
    client, headers = cluster_client_either_way, cluster_world.key.headers
    scope = cluster_world.tenant.scope
    for definition in (
        CONTRACT,
        {
            "record": "customer",
            "name": "seats",
            "label": "S",
            "type": "integer",
            "filterable": True,
        },
    ):
        asyncio.run(service.define(changes, scope, validated(CustomFieldFields, definition)))
    customers_path = "/api/v1/integration/customers"

    created = client.post(
        customers_path,
        json={"last_name": "Ada", "custom_fields": {"contract": "C-1", "seats": 1}},
        headers=headers,
    )
    changed = client.patch(
        f"{customers_path}/{created.json()['id']}",
        json={"custom_fields": {"seats": 2}},
        headers=headers,
    )
    batch = client.post(
        f"{customers_path}/batch",
        json={
            "operations": [
                {
                    "op": "upsert",
                    "upsert_key": "custom_fields.contract",
                    "data": {"last_name": "Ada", "custom_fields": {"contract": c, "seats": 3}},
                }
                for c in ("C-1", "C-2")
            ]
        },
        headers=headers,
    )
    listed = client.get(customers_path, params={"custom_fields.seats": "3"}, headers=headers)

    assert created.status_code == 201, created.text
    assert changed.json()["custom_fields"] == {"contract": "C-1", "seats": 2}
    assert [result["outcome"] for result in batch.json()["results"]] == ["updated", "created"]
    assert [c["custom_fields"]["contract"] for c in listed.json()["data"]] == ["C-1", "C-2"]


GRAPHQL_CUSTOMERS = """
query ($filter: CustomerFilter) {
  customers(filter: $filter) { totalCount edges { node { lastName customFields } } }
}"""


def test_graphql_lists_filter_by_custom_values_on_the_cluster_each_statement_routed_whole(
    cluster_client_either_way: TestClient,
    cluster_world: TenantWorld,
    changes: SchemaChanges,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GraphQL list's ``customFields`` filter narrows its compiled statement (page and count)
    as on one server, each statement Citus routes whole."""
    client, headers = cluster_client_either_way, cluster_world.key.headers
    seats = {"record": "customer", "name": "seats", "label": "S", "type": "integer"}
    definition = validated(CustomFieldFields, {**seats, "filterable": True})
    asyncio.run(service.define(changes, cluster_world.tenant.scope, definition))
    for number in (1, 2, 3):
        client.post(
            "/api/v1/integration/customers",
            json={"last_name": f"N{number}", "custom_fields": {"seats": number}},
            headers=headers,
        ).raise_for_status()
    body = {"query": GRAPHQL_CUSTOMERS, "variables": {"filter": {"customFields": {"seats.gte": 2}}}}

    with statements_sent(monkeypatch) as sent:
        answer = client.post("/graphql", json=body, headers=headers).json()

    listed = answer["data"]["customers"]
    assert listed["totalCount"] == 2
    assert [edge["node"] for edge in listed["edges"]] == [
        {"lastName": "N2", "customFields": {"seats": 2}},
        {"lastName": "N3", "customFields": {"seats": 3}},
    ]
    assert_routed_whole(citus_url, sent)
