"""The feed shows a client its own writes: a read holds every event that committed before it
began, whoever numbered that event (the feed itself, another feed reader, a live hub)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dealbase.db.database import Database
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import repository
from dealbase.platform.events import service as events
from dealbase.platform.events.models import Event, EventFilter
from dealbase.platform.live.hub import Hub
from dealbase.platform.validation import department_of, validated
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock

# A bound on waiting for a condition that holds at once on a working build, not a margin.
CONDITION_SECONDS = 30.0
WRITES_WITH_A_SUBSCRIBER = 100


def _scope(world: TenantWorld) -> Scope:
    return world.tenant.scope.in_department(world.department.id)


def _create(database: Database, scope: Scope, name: str) -> None:
    with database.unit_of_work(scope) as uow:
        customers.create(uow, validated(CustomerFields, {"last_name": name}))


def _names(found: list[Event]) -> list[str]:
    return [str(event.data["last_name"]) for event in found]


class ConcurrentNumberer:
    """Another reader of the department (a live hub, a second feed reader) numbering its
    committed events on a connection of its own, in a thread."""

    def __init__(self, database: Database, scope: Scope) -> None:
        self.database = database
        self.scope = scope
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._number)

    def _number(self) -> None:
        try:
            with self.database.unit_of_work(self.scope) as uow:
                events.number_all_committed(uow, [department_of(self.scope)])
        except BaseException as failure:
            self.failure = failure

    def run_until_done_or_blocked(self) -> None:
        """Starts it, and returns once it has committed or waits for a lock the caller holds."""
        self.thread.start()
        wait_until_a_transaction_waits_for_a_lock(
            self.database, CONDITION_SECONDS, or_until=lambda: not self.thread.is_alive()
        )

    def join(self) -> None:
        self.thread.join(CONDITION_SECONDS)
        assert not self.thread.is_alive()
        assert self.failure is None, self.failure


def test_a_read_shows_the_events_another_reader_numbered_and_committed_while_it_read(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving a dashboard's hub made likely: the feed's read, then another reader
    numbering the same committed events and committing, before the feed looks for any to
    number. The feed must still answer them."""
    scope = _scope(world)
    with database.unit_of_work(scope) as uow:
        cursor = events.feed(uow, EventFilter(), 10, None).next_cursor
    _create(database, scope, "Written")
    numberer = ConcurrentNumberer(database, scope)
    real_events_after = repository.events_after

    def events_after_then_another_numbers(*args: Any, **kwargs: Any) -> Callable[[], list[Event]]:
        found = real_events_after(*args, **kwargs)
        if numberer.thread.ident is None:
            numberer.run_until_done_or_blocked()
        return found

    monkeypatch.setattr(repository, "events_after", events_after_then_another_numbers)
    with database.unit_of_work(scope) as uow:
        page = events.feed(uow, EventFilter(), 10, cursor)
    numberer.join()

    assert _names(page.items) == ["Written"]
    assert [event.position for event in page.items] == [1]


def test_every_read_right_after_a_write_shows_it_while_a_live_subscriber_numbers_beside_it(
    database: Database, world: TenantWorld
) -> None:
    """An integration that writes and then reads the feed from the cursor it held, while a
    dashboard's subscription on the same department numbers each commit as it is announced."""
    scope = _scope(world)
    misses: list[int] = []

    async def main() -> None:
        hub = Hub(database)
        subscription = await hub.subscribe(scope, None)
        stop = asyncio.Event()

        async def announce_while_writes_go_on() -> None:
            while not stop.is_set():
                hub.announce(scope.schema)
                await asyncio.sleep(0)

        async def read_like_a_dashboard() -> None:
            while True:
                await subscription.next()

        announcer = asyncio.create_task(announce_while_writes_go_on())
        dashboard = asyncio.create_task(read_like_a_dashboard())

        def write_then_read(index: int, cursor: str) -> str:
            _create(database, scope, f"Write {index}")
            with database.unit_of_work(scope) as uow:
                page = events.feed(uow, EventFilter(), 100, cursor)
            if f"Write {index}" not in _names(page.items):
                misses.append(index)
            return page.next_cursor

        try:
            with database.unit_of_work(scope) as uow:
                cursor = events.feed(uow, EventFilter(), 100, None).next_cursor
            for index in range(WRITES_WITH_A_SUBSCRIBER):
                cursor = await asyncio.to_thread(write_then_read, index, cursor)
        finally:
            stop.set()
            await announcer
            dashboard.cancel()
            await hub.close()

    asyncio.run(main())

    assert misses == []
