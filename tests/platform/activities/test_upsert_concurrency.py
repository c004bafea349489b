"""Upserts of one new external id by transactions running at once: one activity, and every
writer succeeds (the later ones update what the first created)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select

from dealbase.platform.activities import service
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.tables import activities
from dealbase.tenancy.database.connections import Database
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock


def activities_with(
    database: Database, world: TenantWorld, external_id: str
) -> list[tuple[str | None, int]]:
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(activities.c.subject, activities.c.version).where(
                activities.c.external_id == external_id
            )
        )
        return [(row[0], row[1]) for row in rows]


def a_customer(database: Database, scope: Scope) -> uuid.UUID:
    with database.unit_of_work(scope) as uow:
        return customers.create(uow, CustomerFields(last_name="Lovelace")).id


def test_an_upsert_that_meets_an_uncommitted_insert_waits_and_updates(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    customer_id = a_customer(database, scope)
    first_inserted = threading.Event()

    def first() -> str:
        with database.unit_of_work(scope) as uow:
            fields = ActivityFields(type="call", subject="First", customer_id=customer_id)
            result = service.upsert(uow, "call-1", fields)
            first_inserted.set()
            # Held open until the second, having found no activity, waits in its own insert.
            wait_until_a_transaction_waits_for_a_lock(database)
            return result.outcome

    def second() -> str:
        assert first_inserted.wait(10)
        with database.unit_of_work(scope) as uow:
            fields = ActivityFields(type="call", subject="Second", customer_id=customer_id)
            result = service.upsert(uow, "call-1", fields)
        return result.outcome

    with ThreadPoolExecutor(2) as pool:
        firsts, seconds = pool.submit(first), pool.submit(second)
        assert firsts.result(timeout=30) == "created"
        outcome = seconds.result(timeout=30)

    # It waited for the first's commit in its insert (the first commits only once it waits).
    assert outcome == "updated"
    assert activities_with(database, world, "call-1") == [("Second", 2)]


def test_many_upserts_of_one_new_external_id_at_once_make_one_activity(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    customer_id = a_customer(database, scope)
    writers = 3
    start = threading.Barrier(writers)

    def upsert(writer: int) -> str:
        fields = ActivityFields(type="task", subject=f"W{writer}", customer_id=customer_id)
        with database.unit_of_work(scope) as uow:
            start.wait(10)
            return service.upsert(uow, "task-1", fields).outcome

    with ThreadPoolExecutor(writers) as pool:
        outcomes = sorted(pool.map(upsert, range(writers), timeout=60))

    assert outcomes.count("created") == 1
    assert set(outcomes) <= {"created", "updated"}
    assert len(activities_with(database, world, "task-1")) == 1
