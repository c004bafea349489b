"""A custom field of a tenant on a distributed schema: its column and its unique index are made
through the coordinator and hold on the worker that keeps the schema; deleting it drops both."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.models import CustomFieldFields
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.validation import validated
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
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
