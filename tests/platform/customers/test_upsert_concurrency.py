"""Upserts of the same external ids by transactions running at once: one row per external id,
every writer succeeds, and no two batches deadlock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from dealbase.platform.batches.models import Batch, Operation
from dealbase.platform.customers import service
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.tables import customers
from dealbase.tenancy.database.connections import Database
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock


def rows_with(database: Database, world: TenantWorld, external_id: str) -> list[str]:
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        rows = uow.connection.execute(
            select(customers.c.last_name).where(customers.c.external_id == external_id)
        )
        return [row[0] for row in rows]


def test_two_upserts_of_one_new_external_id_at_once_make_one_customer(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    first_inserted = threading.Event()

    def first() -> str:
        with database.unit_of_work(scope) as uow:
            result = service.upsert(uow, "shop-1", CustomerFields(last_name="First"))
            first_inserted.set()
            # Held open until the second writer, having found no row, waits in its own insert.
            wait_until_a_transaction_waits_for_a_lock(database)
            return result.outcome

    def second() -> str:
        first_inserted.wait(5)
        with database.unit_of_work(scope) as uow:
            return service.upsert(
                uow, "shop-1", CustomerFields(last_name="Second", city="Rome")
            ).outcome

    with ThreadPoolExecutor(2) as pool:
        outcomes = [pool.submit(first), pool.submit(second)]
        assert [outcome.result(timeout=30) for outcome in outcomes] == ["created", "updated"]

    assert rows_with(database, world, "shop-1") == ["Second"]


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
        with database.unit_of_work(scope) as uow:
            return [result.outcome for result in service.batch(uow, batch, atomic=True)]

    with ThreadPoolExecutor(4) as pool:
        outcomes = [outcome for run in pool.map(sync, range(4)) for outcome in run]

    assert "failed" not in outcomes
    assert outcomes.count("created") == len(external_ids)
    with database.unit_of_work(scope) as uow:
        counted = uow.connection.execute(
            select(func.count(), func.count(func.distinct(customers.c.external_id)))
        ).one()
    assert tuple(counted) == (1000, 1000)
