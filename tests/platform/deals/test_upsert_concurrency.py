"""Upserts of one new external id by transactions running at once: one deal, and every writer
succeeds (the later ones update what the first created)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select

from dealbase.platform.deals import service
from dealbase.platform.deals.models import DealUpsert
from dealbase.platform.tables import deals
from dealbase.tenancy.database.connections import Database
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock


def deals_with(database: Database, world: TenantWorld, external_id: str) -> list[tuple[str, int]]:
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(deals.c.name, deals.c.version).where(deals.c.external_id == external_id)
        )
        return [(row[0], row[1]) for row in rows]


def test_an_upsert_that_meets_an_uncommitted_insert_waits_and_updates(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    first_inserted = threading.Event()

    def first() -> str:
        with database.unit_of_work(scope) as uow:
            result = service.upsert(uow, "order-1", DealUpsert(name="First"))
            first_inserted.set()
            # Held open until the second, having found no deal, waits in its own insert.
            wait_until_a_transaction_waits_for_a_lock(database)
            return result.outcome

    def second() -> str:
        assert first_inserted.wait(10)
        with database.unit_of_work(scope) as uow:
            result = service.upsert(uow, "order-1", DealUpsert(name="Second", volume=5))
        return result.outcome

    with ThreadPoolExecutor(2) as pool:
        firsts, seconds = pool.submit(first), pool.submit(second)
        assert firsts.result(timeout=30) == "created"
        outcome = seconds.result(timeout=30)

    # It waited for the first's commit in its insert (the first commits only once it waits).
    assert outcome == "updated"
    assert deals_with(database, world, "order-1") == [("Second", 2)]


def test_many_upserts_of_one_new_external_id_at_once_make_one_deal(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    writers = 3
    start = threading.Barrier(writers)

    def upsert(writer: int) -> str:
        with database.unit_of_work(scope) as uow:
            start.wait(10)
            return service.upsert(uow, "order-1", DealUpsert(name="D", volume=writer)).outcome

    with ThreadPoolExecutor(writers) as pool:
        outcomes = sorted(pool.map(upsert, range(writers), timeout=60))

    assert outcomes.count("created") == 1
    assert set(outcomes) <= {"created", "updated"}
    assert len(deals_with(database, world, "order-1")) == 1
