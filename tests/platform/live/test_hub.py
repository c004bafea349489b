"""The hub of a server process: a department's events handed to each subscriber in commit
order, from a resumed cursor without a gap or a duplicate, the board after each change of a
deal, and a subscriber that does not read ended once its buffer is full."""

from __future__ import annotations

import asyncio
import threading
import uuid

from dealbase.db.database import Database
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate
from dealbase.platform.events import service as events
from dealbase.platform.events.models import Event, EventFilter
from dealbase.platform.live.hub import BoardUpdate, Ended, Ending, Hub, Limits, Resource
from dealbase.platform.validation import validated
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld

# A failure bound on what each test waits for: only a stuck hub comes near it. (The resumed
# subscriber's 170 events, 40 of them written meanwhile, took 8.4 s beside two busy CPU loops
# and other test processes: a bound of 10 s was a margin, not a failure bound.)
WAIT_SECONDS = 60.0


def _scope(world: TenantWorld) -> Scope:
    return Scope.for_tenant(world.tenant.id).in_department(world.department.id)


def _write_customers(database: Database, scope: Scope, names: list[str]) -> None:
    for name in names:
        with database.unit_of_work(scope) as uow:
            customers.create(uow, validated(CustomerFields, {"last_name": name}))


def _create_deal(database: Database, scope: Scope, volume: int) -> None:
    with database.unit_of_work(scope) as uow:
        deals.create(
            uow, validated(DealCreate, {"name": "Engine", "volume": volume, "customers": []})
        )


def _cursor_after(database: Database, scope: Scope, count: int) -> str:
    """The feed's cursor after its first ``count`` events."""
    with database.unit_of_work(scope) as uow:
        return events.feed(uow, EventFilter(), count, None).next_cursor


def test_a_subscriber_resuming_from_a_cursor_gets_each_later_event_once_while_writes_go_on(
    database: Database, world: TenantWorld
) -> None:
    scope = _scope(world)
    # More than a page behind the channel: the subscriber catches up page by page.
    _write_customers(database, scope, [f"before {n}" for n in range(150)])
    cursor = _cursor_after(database, scope, 20)

    async def main() -> list[int]:
        hub = Hub(database)
        # A channel already live on the department, as another subscriber keeps it.
        watcher = await hub.subscribe(scope, None)
        resumed = await hub.subscribe(scope, cursor)
        writer = threading.Thread(
            target=_write_customers, args=(database, scope, [f"during {n}" for n in range(40)])
        )
        writer.start()
        positions: list[int] = []
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while len(positions) < 170:
                    # Announced again and again while the writer runs, as notices arrive.
                    hub.announce(scope.schema)
                    try:
                        async with asyncio.timeout(0.05):
                            item = await resumed.next()
                    except TimeoutError:
                        continue
                    assert isinstance(item, Event)
                    positions.append(item.position)
        finally:
            await asyncio.to_thread(writer.join)
            hub.unsubscribe(watcher)
            await hub.close()
        return positions

    assert asyncio.run(main()) == list(range(21, 191))


def test_a_subscriber_without_a_cursor_gets_only_what_commits_after_it_subscribed(
    database: Database, world: TenantWorld
) -> None:
    scope = _scope(world)
    _write_customers(database, scope, ["old"])

    async def main() -> Event:
        hub = Hub(database)
        subscriber = await hub.subscribe(scope, None)
        await asyncio.to_thread(_write_customers, database, scope, ["new"])
        hub.announce(scope.schema)
        async with asyncio.timeout(WAIT_SECONDS):
            item = await subscriber.next()
        await hub.close()
        assert isinstance(item, Event)
        return item

    event = asyncio.run(main())
    assert (event.position, event.data["last_name"]) == (2, "new")


def test_a_subscriber_to_deals_skips_other_events_and_resumes_after_them(
    database: Database, world: TenantWorld
) -> None:
    scope = _scope(world)

    async def main() -> tuple[list[str], int]:
        hub = Hub(database)
        subscriber = await hub.subscribe(scope, None, frozenset({Resource.DEAL}))
        await asyncio.to_thread(_write_customers, database, scope, ["a", "b"])
        await asyncio.to_thread(_create_deal, database, scope, 10)
        hub.announce(scope.schema)
        async with asyncio.timeout(WAIT_SECONDS):
            item = await subscriber.next()
        await hub.close()
        assert isinstance(item, Event)
        return [item.type], subscriber.position

    types, position = asyncio.run(main())
    assert (types, position) == (["deal.created"], 3)


def test_the_board_comes_first_then_again_after_each_change_of_a_deal(
    database: Database, world: TenantWorld
) -> None:
    scope = _scope(world)

    async def main() -> tuple[BoardUpdate, BoardUpdate]:
        hub = Hub(database)
        subscriber = await hub.subscribe(scope, None, frozenset(), board=True)
        first = await subscriber.next()
        await asyncio.to_thread(_create_deal, database, scope, 500)
        await asyncio.to_thread(_create_deal, database, scope, 250)
        hub.announce(scope.schema)
        async with asyncio.timeout(WAIT_SECONDS):
            second = await subscriber.next()
        await hub.close()
        assert isinstance(first, BoardUpdate)
        assert isinstance(second, BoardUpdate)
        return first, second

    first, second = asyncio.run(main())
    assert [(s.deal_count, s.total_volume) for s in first.steps][:2] == [(0, 0), (0, 0)]
    assert first.position == 0
    assert [(s.deal_count, s.total_volume) for s in second.steps][:2] == [(2, 750), (0, 0)]
    assert second.position == 2


def test_a_subscriber_that_does_not_read_is_ended_as_a_slow_consumer_once_its_buffer_is_full(
    database: Database, world: TenantWorld
) -> None:
    scope = _scope(world)

    async def main() -> tuple[list[Ending], Ending | None, int]:
        hub = Hub(database, Limits(buffer=3))
        told: list[Ending] = []
        slow = await hub.subscribe(scope, None, on_ended=told.append)
        await asyncio.to_thread(_write_customers, database, scope, ["1", "2", "3", "4"])
        hub.announce(scope.schema)
        async with asyncio.timeout(WAIT_SECONDS):
            while slow.ended is None:
                await asyncio.sleep(0.01)
        try:
            await slow.next()
        except Ended as ended:
            raised: Ending | None = ended.why
        else:
            raised = None
        count = hub.subscriber_count()
        await hub.close()
        return told, raised, count

    told, raised, count = asyncio.run(main())
    assert told == [Ending.SLOW_CONSUMER]
    assert raised is Ending.SLOW_CONSUMER
    assert count == 0


def test_closing_the_hub_ends_each_subscription_as_a_shutdown(
    database: Database, world: TenantWorld
) -> None:
    async def main() -> list[Ending]:
        hub = Hub(database)
        told: list[Ending] = []
        await hub.subscribe(_scope(world), None, on_ended=told.append)
        await hub.subscribe(_scope(world), None, on_ended=told.append)
        await hub.close()
        return told

    assert asyncio.run(main()) == [Ending.SHUTDOWN, Ending.SHUTDOWN]


def test_a_department_whose_first_read_fails_leaves_no_channel_and_the_next_subscriber_retries(
    database: Database, world: TenantWorld
) -> None:
    missing = Scope.for_tenant(uuid.uuid4()).in_department(world.department.id)

    async def main() -> tuple[type[BaseException], int, BoardUpdate | Event]:
        hub = Hub(database)
        try:
            await hub.subscribe(missing, None)
        except Exception as failed:
            raised: type[BaseException] = type(failed)
        else:
            raise AssertionError("a schema that does not exist was read")
        left = hub.subscriber_count() + len(hub._channels)
        # The real department's subscription is unaffected, its channel made afresh.
        subscriber = await hub.subscribe(_scope(world), None, frozenset(), board=True)
        first = await subscriber.next()
        await hub.close()
        return raised, left, first

    raised, left, first = asyncio.run(main())
    assert issubclass(raised, Exception)
    assert left == 0
    assert isinstance(first, BoardUpdate)


def test_a_subscriber_catching_up_reads_at_its_own_pace_whatever_its_buffer(
    database: Database, world: TenantWorld
) -> None:
    scope = _scope(world)
    # The cursor of an empty feed: where its first event will come.
    start = _cursor_after(database, scope, 1)
    _write_customers(database, scope, [f"missed {n}" for n in range(10)])

    async def main() -> tuple[list[int], Ending | None]:
        hub = Hub(database, Limits(buffer=3))
        subscriber = await hub.subscribe(scope, start)
        positions = []
        async with asyncio.timeout(WAIT_SECONDS):
            for _ in range(10):
                item = await subscriber.next()
                assert isinstance(item, Event)
                positions.append(item.position)
        await hub.close()
        return positions, subscriber.ended

    positions, ended = asyncio.run(main())
    assert positions == list(range(1, 11))
    # Ended only by the hub's close, not as a slow consumer.
    assert ended is Ending.SHUTDOWN
