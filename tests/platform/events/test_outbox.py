"""The outbox under concurrent writers of one department (positions given after commit, read in
commit order, each event once), and the purge."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import delete, func, select, text, update

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate
from dealbase.platform.events import repository as outbox
from dealbase.platform.events import service as events
from dealbase.platform.events.models import Event, EventFilter
from dealbase.platform.tables import events as events_table
from dealbase.platform.validation import validated
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.tenancy.control_tables import webhook_wakeups
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld

WRITERS = 32
TRANSACTIONS_PER_WRITER = 5
# Events the reader sees commit while the held transaction is open, before it commits.
SEEN_WHILE_HELD = 40


@pytest.fixture
def roomy_database(database_url: str) -> Iterator[Database]:
    """A connection for each writer, the held transaction and the reader."""
    db = Database(database_url, pool_size=WRITERS + 4, max_overflow=0)
    yield db
    db.pool.close()


@dataclass(frozen=True)
class Committed:
    """One writer's transaction: when it began and when its COMMIT returned."""

    name: str
    began: float
    committed: float


def _customer(name: str) -> CustomerFields:
    return validated(CustomerFields, {"last_name": name})


def _name(event: Event) -> str:
    return str(event.data["last_name"])


class Reader:
    """Polls the feed from its cursor until told to stop, remembering what it saw and when."""

    def __init__(self, database: Database, scope: Scope) -> None:
        self.database = database
        self.scope = scope
        self.seen: list[Event] = []
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.failed: BaseException | None = None

    def poll_once(self, cursor: str | None) -> str:
        with self.database.unit_of_work(self.scope) as uow:
            page = events.feed(uow, EventFilter(), 100, cursor)
        with self.changed:
            self.seen.extend(page.items)
            self.changed.notify_all()
        return page.next_cursor

    def run(self) -> None:
        try:
            cursor = None
            while not self.stop.is_set():
                cursor = self.poll_once(cursor)
            # Whatever committed before the stop is read to the end.
            while True:
                before = len(self.seen)
                cursor = self.poll_once(cursor)
                if len(self.seen) == before:
                    return
        except BaseException as failure:
            with self.changed:
                self.failed = failure
                self.changed.notify_all()
            raise

    def wait_for(self, count: int, timeout: float = 30) -> None:
        with self.changed:
            self.changed.wait_for(
                lambda: self.failed is not None or len(self.seen) >= count, timeout
            )
            assert self.failed is None, self.failed
            assert len(self.seen) >= count, f"the reader saw {len(self.seen)}, not {count}"


def test_32_writers_and_a_held_transaction_in_one_department_are_read_once_each_in_commit_order(
    roomy_database: Database, world: TenantWorld
) -> None:
    database = roomy_database
    scope = world.tenant.scope.in_department(world.department.id)
    reader = Reader(database, scope)
    committed: list[Committed] = []
    record_lock = threading.Lock()
    held_open = threading.Event()
    seen_when_held_committed: list[int] = []

    def write(writer: int) -> None:
        for transaction in range(TRANSACTIONS_PER_WRITER):
            name = f"w{writer}-t{transaction}"
            began = time.monotonic()
            with database.unit_of_work(scope) as uow:
                # Two events a transaction: they keep the order the transaction recorded them in.
                customers.create(uow, _customer(f"{name}-first"))
                customers.create(uow, _customer(f"{name}-second"))
            with record_lock:
                committed.append(Committed(name, began, time.monotonic()))

    def hold() -> None:
        with database.unit_of_work(scope) as uow:
            customers.create(uow, _customer("held-first"))
            customers.create(uow, _customer("held-second"))
            held_open.set()
            # Later transactions commit and are read while this one stays open.
            reader.wait_for(SEEN_WHILE_HELD)
            seen_when_held_committed.append(len(reader.seen))

    holder = threading.Thread(target=hold)
    holder.start()
    assert held_open.wait(10)
    reading = threading.Thread(target=reader.run)
    reading.start()
    writers = [threading.Thread(target=write, args=(writer,)) for writer in range(WRITERS)]
    for thread in writers:
        thread.start()
    for thread in [*writers, holder]:
        thread.join()
    reader.stop.set()
    reading.join()
    assert reader.failed is None, reader.failed

    seen = reader.seen
    total = (WRITERS * TRANSACTIONS_PER_WRITER + 1) * 2
    # Each event exactly once, numbered 1, 2, 3... in the order the reader met them.
    assert len({event.id for event in seen}) == len(seen) == total
    assert [event.position for event in seen] == list(range(1, total + 1))
    order = {_name(event): index for index, event in enumerate(seen)}
    # The held transaction's events come after all that was read before it committed.
    (seen_before_commit,) = seen_when_held_committed
    assert seen_before_commit >= SEEN_WHILE_HELD
    assert order["held-first"] >= seen_before_commit
    assert order["held-second"] == order["held-first"] + 1
    # A transaction's events stay together and in order.
    for transaction in committed:
        assert order[f"{transaction.name}-second"] == order[f"{transaction.name}-first"] + 1
    # Commit order: a transaction that began after another's COMMIT returned comes after it.
    for earlier in committed:
        for later in committed:
            if earlier.committed < later.began:
                assert order[f"{earlier.name}-first"] < order[f"{later.name}-first"], (
                    earlier,
                    later,
                )


def test_events_get_positions_only_once_committed_and_only_when_read(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        customers.create(uow, _customer("Unread"))
        # Written, not yet committed: a reader has nothing to number.
        with database.unit_of_work(scope) as reader:
            assert events.number_committed(reader, [world.department.id]) == 0
    with database.unit_of_work(scope) as uow:
        assert uow.connection.execute(select(events_table.c.position)).all() == [(None,)]
        page = events.feed(uow, EventFilter(), 10, None)
        assert [(_name(event), event.position) for event in page.items] == [("Unread", 1)]
        assert uow.connection.execute(select(events_table.c.position)).all() == [(1,)]


def test_purge_drops_events_older_than_30_days_and_the_feed_no_longer_shows_them(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)
    fields = _customer("Old")
    for department in world.departments:
        with database.unit_of_work(world.tenant.scope.in_department(department.id)) as uow:
            customers.create(uow, fields)
            customers.create(uow, fields)
        with database.unit_of_work(world.tenant.scope.in_department(department.id)) as uow:
            events.number_all_committed(uow, [department.id])
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


def test_a_wakeup_that_fails_after_the_commit_leaves_the_write_done_and_its_event_in_the_feed(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        endpoints.create(
            uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
        )
    # The statement that wakes the worker, after the events' COMMIT, fails.
    monkeypatch.setattr(outbox, "WAKEUP", text("SELECT 1 / 0"))

    with database.unit_of_work(scope) as uow:
        created = customers.create(uow, _customer("Committed"))

    with database.unit_of_work(scope) as uow:
        assert customers.RECORD.get(uow, created.id) == created
        page = events.feed(uow, EventFilter(), 10, None)
        assert [_name(event) for event in page.items] == ["Committed"]


def test_a_customer_create_wakes_the_worker_only_where_an_enabled_endpoint_listens(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    quiet, listened = make_tenant(), make_tenant()
    with database.unit_of_work(listened.tenant.scope.in_department(listened.department.id)) as uow:
        endpoints.create(
            uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
        )
    schemas = [quiet.tenant.schema, listened.tenant.schema]
    with database.control() as connection:
        connection.execute(
            delete(webhook_wakeups).where(webhook_wakeups.c.schema_name.in_(schemas))
        )

    for world in (quiet, listened):
        with database.unit_of_work(world.tenant.scope.in_department(world.department.id)) as uow:
            customers.create(uow, _customer("Woken?"))

    with database.control() as connection:
        woken = {
            schema
            for (schema,) in connection.execute(
                select(webhook_wakeups.c.schema_name).where(
                    webhook_wakeups.c.schema_name.in_(schemas)
                )
            )
        }
    assert woken == {listened.tenant.schema}


def _create_customer(uow: UnitOfWork) -> None:
    customers.create(uow, _customer("Woken?"))


def _create_deal(uow: UnitOfWork) -> None:
    deals.create(uow, DealCreate(name="Woken?", customers=[_customer("Dealt")]))


@pytest.mark.parametrize("create", [_create_customer, _create_deal], ids=["customer", "deal"])
def test_a_create_wakes_the_worker_only_for_an_enabled_endpoint_of_its_own_department(
    database: Database,
    make_tenant: Callable[..., TenantWorld],
    create: Callable[[UnitOfWork], None],
) -> None:
    world = make_tenant(departments=3)
    listened, quiet, disabled = world.departments
    with database.unit_of_work(world.tenant.scope.in_department(listened.id)) as uow:
        endpoints.create(
            uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
        )
    with database.unit_of_work(world.tenant.scope.in_department(disabled.id)) as uow:
        endpoints.create(
            uow,
            Checked(
                WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"], enabled=False)
            ),
        )

    def woken_after_a_create_in(department_id: uuid.UUID) -> bool:
        with database.control() as connection:
            connection.execute(
                delete(webhook_wakeups).where(webhook_wakeups.c.schema_name == world.tenant.schema)
            )
        with database.unit_of_work(world.tenant.scope.in_department(department_id)) as uow:
            create(uow)
        with database.control() as connection:
            return (
                connection.execute(
                    select(webhook_wakeups.c.schema_name).where(
                        webhook_wakeups.c.schema_name == world.tenant.schema
                    )
                ).first()
                is not None
            )

    assert not woken_after_a_create_in(quiet.id)
    assert not woken_after_a_create_in(disabled.id)
    assert woken_after_a_create_in(listened.id)
