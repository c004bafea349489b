"""Upserts of one new external id by transactions running at once, for every synced record: one
record, and every writer succeeds (the later ones update what the first created), by the rules
of ``batches/upserts.py`` whether the record is written in bulk (customers, activities: the
unit of work runs again) or one at a time (deals: the write is judged again)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Column, Table, select

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.platform.activities import service as activities_service
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.customers import service as customers_service
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals_service
from dealbase.platform.deals.models import DealUpsert
from dealbase.platform.tables import activities, customers, deals
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock


@dataclass(frozen=True)
class Synced:
    """A synced record as these races write it: ``upsert(uow, external_id, label, parent)``,
    the label kept in ``label_column``; ``parent`` is what the record needs to exist first."""

    table: Table
    label_column: Column[Any]
    upsert: Callable[[UnitOfWork, str, str, uuid.UUID | None], str]
    needs_a_customer: bool = False


def _a_customer(uow: UnitOfWork, external_id: str, label: str, _: uuid.UUID | None) -> str:
    return (
        customers_service.RECORD.upsert(uow, external_id, CustomerFields(last_name=label))
        .read()
        .outcome
    )


def _a_deal(uow: UnitOfWork, external_id: str, label: str, _: uuid.UUID | None) -> str:
    return deals_service.RECORD.upsert(uow, external_id, DealUpsert(name=label)).read().outcome


def _an_activity(uow: UnitOfWork, external_id: str, label: str, customer: uuid.UUID | None) -> str:
    assert customer is not None
    fields = ActivityFields(type="call", subject=label, customer_id=customer)
    return activities_service.RECORD.upsert(uow, external_id, fields).read().outcome


RECORDS = {
    "customer": Synced(customers, customers.c.last_name, _a_customer),
    "deal": Synced(deals, deals.c.name, _a_deal),
    "activity": Synced(activities, activities.c.subject, _an_activity, needs_a_customer=True),
}


@pytest.fixture(params=sorted(RECORDS))
def record(request: pytest.FixtureRequest) -> Synced:
    return RECORDS[request.param]


def _parent(database: Database, scope: Scope, record: Synced) -> uuid.UUID | None:
    if not record.needs_a_customer:
        return None
    with database.unit_of_work(scope) as uow:
        return customers_service.create(uow, CustomerFields(last_name="Lovelace")).id


def _written(
    database: Database, world: TenantWorld, record: Synced, external_id: str
) -> list[tuple[str, int]]:
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(record.label_column, record.table.c.version).where(
                record.table.c.external_id == external_id
            )
        )
        return [(row[0], row[1]) for row in rows]


def upsert_meeting_an_uncommitted_insert(
    database: Database,
    world: TenantWorld,
    record: Synced,
    until_the_second_waits: Callable[[], None],
    timeout: float = 30,
) -> str:
    """The outcome of an upsert of sync-1 ("Second") that meets the insert of sync-1 ("First")
    by another transaction, held open until ``until_the_second_waits`` returns."""
    scope = world.tenant.scope.in_department(world.department.id)
    parent = _parent(database, scope, record)
    first_inserted = threading.Event()

    def first(uow: UnitOfWork) -> str:
        outcome = record.upsert(uow, "sync-1", "First", parent)
        first_inserted.set()
        # Held open until the second, having found no record, waits in its own insert.
        until_the_second_waits()
        return outcome

    def second() -> str:
        assert first_inserted.wait(10)
        # Run as the APIs run it: a bulk insert that meets the first's runs again (RunAgain).
        return database.run_here(scope, lambda uow: record.upsert(uow, "sync-1", "Second", parent))

    with ThreadPoolExecutor(2) as pool:
        firsts = pool.submit(database.run_here, scope, first)
        seconds = pool.submit(second)
        assert firsts.result(timeout=timeout) == "created"
        return seconds.result(timeout=timeout)


def upserts_at_once(database: Database, world: TenantWorld, record: Synced) -> list[str]:
    """The outcomes, sorted, of three transactions that upsert sync-2 at once."""
    scope = world.tenant.scope.in_department(world.department.id)
    parent = _parent(database, scope, record)
    writers = 3
    start = threading.Barrier(writers)

    def upsert(writer: int) -> str:
        start.wait(10)
        return database.run_here(
            scope, lambda uow: record.upsert(uow, "sync-2", f"W{writer}", parent)
        )

    with ThreadPoolExecutor(writers) as pool:
        return sorted(pool.map(upsert, range(writers), timeout=60))


def test_an_upsert_that_meets_an_uncommitted_insert_waits_and_updates(
    database: Database, world: TenantWorld, record: Synced
) -> None:
    outcome = upsert_meeting_an_uncommitted_insert(
        database, world, record, lambda: wait_until_a_transaction_waits_for_a_lock(database)
    )

    # It waited for the first's commit in its insert (the first commits only once it waits).
    assert outcome == "updated"
    assert _written(database, world, record, "sync-1") == [("Second", 2)]


def test_many_upserts_of_one_new_external_id_at_once_make_one_record(
    database: Database, world: TenantWorld, record: Synced
) -> None:
    outcomes = upserts_at_once(database, world, record)

    assert outcomes.count("created") == 1
    assert set(outcomes) <= {"created", "updated"}
    assert len(_written(database, world, record, "sync-2")) == 1
