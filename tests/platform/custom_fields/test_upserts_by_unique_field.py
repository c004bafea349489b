"""Batches upserting by a unique custom field the same new values at once, in opposite orders:
one record per value, every writer succeeds (the insert that meets another's runs again, as
one by external id does: tests/platform/customers/test_upsert_concurrency.py)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges
from dealbase.platform.batches.models import Batch, Operation, Result
from dealbase.platform.custom_fields import service as custom_fields
from dealbase.platform.custom_fields.models import CustomFieldFields
from dealbase.platform.customers import service
from dealbase.platform.customers.models import Customer
from dealbase.platform.validation import validated
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
from tests.support import TenantWorld

WRITERS = 4


def test_batches_upserting_the_same_new_unique_values_at_once_make_one_record_each(
    database: Database, database_url: str, world: TenantWorld
) -> None:
    changes = SchemaChanges(database_url, TENANT_OWNER_ROLE)
    try:
        asyncio.run(
            custom_fields.define(
                changes,
                world.tenant.scope,
                validated(
                    CustomFieldFields,
                    {
                        "record": "customer",
                        "name": "contract",
                        "label": "Contract",
                        "type": "text",
                        "unique": True,
                    },
                ),
            )
        )
    finally:
        changes.dispose()
    scope = world.tenant.scope.in_department(world.department.id)
    contracts = [f"C-{n}" for n in range(200)]
    start = threading.Barrier(WRITERS)

    def sync(writer: int) -> list[str]:
        order = contracts if writer % 2 else list(reversed(contracts))
        batch = Batch(
            operations=[
                Operation(
                    op="upsert",
                    upsert_key="custom_fields.contract",
                    data={"last_name": f"W{writer}", "custom_fields": {"contract": contract}},
                )
                for contract in order
            ]
        )
        start.wait()
        results: list[Result[Customer]] = database.run_here(
            scope, lambda uow: service.RECORD.batch(uow, batch, atomic=True)
        )
        return [result.outcome for result in results]

    with ThreadPoolExecutor(WRITERS) as pool:
        outcomes = [outcome for run in pool.map(sync, range(WRITERS)) for outcome in run]

    assert "failed" not in outcomes
    assert outcomes.count("created") == len(contracts)
    with database.control() as connection:
        counted = connection.execute(
            text(
                f"SELECT count(*), count(DISTINCT cf_contract) FROM {world.tenant.schema}.customers"
            )
        ).one()
    assert tuple(counted) == (len(contracts), len(contracts))
