"""The outbox's positions under concurrent writers of one department, and the purge."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import func, select, update

from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import service as events
from dealbase.platform.events.models import EventFilter
from dealbase.platform.tables import events as events_table
from dealbase.platform.validation import validated
from dealbase.tenancy.database import Database
from tests.support import TenantWorld

WRITERS = 6
TRANSACTIONS_PER_WRITER = 15


def test_concurrent_writers_get_consecutive_positions_that_readers_never_see_out_of_order(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    fields = validated(CustomerFields, {"last_name": "Writer"})
    done = threading.Event()
    snapshots: list[list[int]] = []

    def write() -> None:
        for _ in range(TRANSACTIONS_PER_WRITER):
            with database.unit_of_work(scope) as uow:
                # Two events per transaction: positions are given a transaction at a time.
                customers.create(uow, fields)
                customers.create(uow, fields)

    def read() -> None:
        while not done.is_set():
            with database.unit_of_work(scope) as uow:
                page = events.feed(uow, EventFilter(), 100, None)
            snapshots.append([event.position for event in page.items])

    writers = [threading.Thread(target=write) for _ in range(WRITERS)]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()

    total = WRITERS * TRANSACTIONS_PER_WRITER * 2
    with database.unit_of_work(scope) as uow:
        positions = [
            position
            for (position,) in uow.connection.execute(
                select(events_table.c.position).order_by(events_table.c.position)
            )
        ]
    assert positions == list(range(1, total + 1))
    # A reader sees a prefix: no later position before an earlier one has committed, which is
    # what lets a poller page by position and miss nothing.
    for seen in snapshots:
        assert seen == list(range(1, min(len(seen), 100) + 1))


def test_purge_drops_events_older_than_30_days_and_the_feed_no_longer_shows_them(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)
    fields = validated(CustomerFields, {"last_name": "Old"})
    for department in world.departments:
        with database.unit_of_work(world.tenant.scope.in_department(department.id)) as uow:
            customers.create(uow, fields)
            customers.create(uow, fields)
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        # One event of each department aged past the retention, one a day short of it.
        uow.connection.execute(
            update(events_table)
            .where(events_table.c.position == 1)
            .values(created_at=func.now() - func.make_interval(0, 0, 0, 31))
        )
        uow.connection.execute(
            update(events_table)
            .where(events_table.c.position == 2)
            .values(created_at=func.now() - func.make_interval(0, 0, 0, 29))
        )
        assert [event.position for event in events.feed(uow, EventFilter(), 10, None).items] == [2]

    with database.unit_of_work(world.tenant.scope) as uow:
        purged = events.purge(uow)
        left = uow.connection.execute(select(events_table.c.position)).all()

    assert purged == 2
    assert sorted(position for (position,) in left) == [2, 2]
