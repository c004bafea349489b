"""Batches upserting the same external ids at once, in opposite orders: one row per external id,
every writer succeeds, and no two batches deadlock (one upsert meeting another, for every synced
record: tests/platform/batches/test_upsert_races.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.platform.batches.models import Batch, Operation, Result
from dealbase.platform.customers import service
from dealbase.platform.customers.models import Customer
from dealbase.platform.tables import customers
from tests.support import TenantWorld


def test_batches_over_the_same_external_ids_in_opposite_orders_all_succeed(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    external_ids = [f"shop-{n}" for n in range(1000)]
    start = threading.Barrier(4)

    def sync(writer: int) -> list[str]:
        order = external_ids if writer % 2 else list(reversed(external_ids))
        batch = Batch(
            operations=[
                Operation(op="upsert", external_id=e, data={"last_name": f"W{writer}"})
                for e in order
            ]
        )
        start.wait(5)
        # A batch whose insert meets another's runs again (``RunAgain``), as Database.run does.
        results: list[Result[Customer]] = database.run_here(
            scope, lambda uow: service.RECORD.batch(uow, batch, atomic=True)
        )
        return [result.outcome for result in results]

    with ThreadPoolExecutor(4) as pool:
        outcomes = [outcome for run in pool.map(sync, range(4)) for outcome in run]

    assert "failed" not in outcomes
    assert outcomes.count("created") == len(external_ids)
    with database.unit_of_work(scope) as uow:
        counted = uow.connection.execute(
            select(func.count(), func.count(func.distinct(customers.c.external_id)))
        ).one()
    assert tuple(counted) == (1000, 1000)
