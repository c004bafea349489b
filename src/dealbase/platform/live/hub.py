"""The fan-out of a server process: each department that has subscribers here is read by one
``Channel``, which hands every new event to each of them.

A department's events are numbered 1, 2, 3... in commit order once they have committed (the
events outbox), so a reader that takes ``position > last seen`` never misses one and never sees
one twice. A channel keeps the last position it read (its head); each announcement that the
tenant committed events (``announce``) makes it read on from there, once, for all its
subscribers, however many there are.

A subscriber starting from an older position (a client resuming with the cursor of the last
event it saw) first reads the events between on its own, a page at a time as it is ready for
them, and joins the channel once it has reached the channel's head: from then on the channel
gives it each event after its own position, so none is skipped and none comes twice.

Everything here runs on the server's event loop; the only awaits are units of work, so the
checks between them (has a catching-up subscriber reached the head?) hold no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import structlog
from sqlalchemy import select

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.platform.events import service as events
from dealbase.platform.events.models import Event, EventFilter
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.pipeline.models import StepTotals
from dealbase.platform.tables import event_positions
from dealbase.platform.validation import department_of
from dealbase.tenancy.scope import Scope

log = structlog.get_logger(__name__)

# Events read per statement: a subscriber resuming far behind reads its way up page by page.
PAGE_SIZE = 100
# Every subscription's cursor is the feed's for every type: one cursor whatever it selects, and
# interchangeable with GET /events' (without a types filter).
ALL_TYPES = EventFilter()


class Resource(Enum):
    CUSTOMER = "customer"
    DEAL = "deal"
    ACTIVITY = "activity"


def resource_of(event: Event) -> Resource:
    # Asked for each event and each subscriber: a dict's lookup rather than the Enum's call.
    found = _RESOURCES.get(event.type.partition(".")[0])
    return found if found is not None else Resource(event.type.partition(".")[0])


_RESOURCES = {resource.value: resource for resource in Resource}


class Ending(Enum):
    """Why the hub ended a subscription; the transports turn each into their close reason."""

    # More events waited for the client than its buffer holds: it reads too slowly.
    SLOW_CONSUMER = "slow_consumer"
    # The server is stopping: reconnect (to another process) and resume.
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class BoardUpdate:
    """A department's board after the events up to ``position`` (at least those)."""

    position: int
    steps: list[StepTotals]


# Asked before a subscriber takes a board after its first, with the subscriber's caller: None
# when it may have one now, else the seconds after which to ask again. Each such board runs the
# subscription's document again, as costly as a request; the first was paid for by its subscribe.
BoardPace = Callable[[Scope], Awaitable[float | None]]


@dataclass(frozen=True, slots=True)
class Limits:
    # Items that may wait for one subscriber before it is ended as a slow consumer.
    buffer: int = 1000


@dataclass(eq=False)
class Subscriber:
    """One subscription's stream of a department's events (those of ``resources``) and, when
    it watches the board, the board after each change of a deal (each after the first once the
    hub's ``pace`` admits it)."""

    hub: Hub
    channel: Channel
    # The last event this subscriber has been given (or skipped, not being its resource).
    position: int
    resources: frozenset[Resource]
    board: bool
    on_ended: Callable[[Ending], None]
    # Whose limits pace its boards: the channel's scope names no key.
    caller: Scope
    live: bool = field(default=False, init=False)
    ended: Ending | None = field(default=None, init=False)
    _items: deque[Event] = field(default_factory=deque, init=False)
    # Only the newest board matters: a newer one replaces one not yet taken.
    _board: BoardUpdate | None = field(default=None, init=False)
    # Its first board is taken: the next ones are paced (its subscribe paid for the first).
    _first_taken: bool = field(default=False, init=False)
    _ready: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _over: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    async def next(self) -> Event | BoardUpdate:
        """The next event or board; raises ``Ended`` once the hub has ended the subscription."""
        while True:
            if self.ended is not None:
                raise Ended(self.ended)
            if self._board is not None:
                if self._first_taken and not await self._paced():
                    continue
                board, self._board = self._board, None
                self._first_taken = True
                return board
            if self._items:
                return self._items.popleft()
            if not self.live:
                await self._catch_up()
                continue
            self._ready.clear()
            await self._ready.wait()

    async def _paced(self) -> bool:
        """Whether the board that waits may be taken now (the hub's ``pace`` admits it). Else
        this waits the time the pace gave (on the loop's clock), or until the subscription
        ends, and says no: the board taken after is whichever is newest by then."""
        pace = self.hub.pace
        if pace is None:
            return True
        wait = await pace(self.caller)
        if wait is None:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._over.wait()
        return False

    async def _catch_up(self) -> None:
        """Reads the next page after this subscriber's position; joins the channel once nothing
        lies between it and the channel's head."""
        channel = self.channel
        if self.position < channel.head:
            found = await self.hub.read_after(channel, self.position)
            for event in found:
                # A page asked for when nothing waited: bounded by the page, not the buffer.
                self._take(event, bounded=False)
            if found:
                return
        # Nothing (more) to read up to the channel's head, which has not moved since the read
        # (no await between): from here on the channel gives this subscriber what follows.
        self.live = True

    def _take(self, event: Event, *, bounded: bool = True) -> bool:
        """Takes ``event`` if it comes after this subscriber's position; False when its buffer
        is full (the subscriber is then ended)."""
        if event.position <= self.position:
            return True
        self.position = event.position
        if resource_of(event) not in self.resources:
            return True
        if bounded and len(self._items) >= self.hub.limits.buffer:
            self.end(Ending.SLOW_CONSUMER)
            return False
        self._items.append(event)
        self._ready.set()
        return True

    def give(self, events_read: list[Event]) -> None:
        """The channel's new events, in order."""
        for event in events_read:
            if not self._take(event):
                return

    def pending_board(self) -> BoardUpdate | None:
        return self._board

    def give_board(self, board: BoardUpdate) -> None:
        self._board = board
        self._ready.set()

    async def wait_ended(self) -> Ending:
        """Until the hub ends the subscription; why it did."""
        await self._over.wait()
        assert self.ended is not None
        return self.ended

    def end(self, why: Ending) -> None:
        if self.ended is None:
            self.ended = why
            self._ready.set()
            self._over.set()
            self.hub.unsubscribe(self)
            self.on_ended(why)


class Ended(Exception):
    def __init__(self, why: Ending) -> None:
        super().__init__(why.value)
        self.why = why


@dataclass(eq=False)
class Channel:
    """One department's events, read once for every subscriber of this process."""

    scope: Scope
    head: int = 0
    subscribers: set[Subscriber] = field(default_factory=set)
    # A read is running; ``again``: an announcement came meanwhile, read once more after it.
    reading: bool = False
    again: bool = False
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    """The process's channels, by tenant schema and department."""

    def __init__(
        self, database: Database, limits: Limits | None = None, *, pace: BoardPace | None = None
    ) -> None:
        self.database = database
        self.limits = limits or Limits()
        # None: every board is handed on as soon as it is read.
        self.pace = pace
        self._channels: dict[tuple[str, uuid.UUID], Channel] = {}
        self._by_schema: dict[str, set[Channel]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.stopping = False

    def subscriber_count(self) -> int:
        return sum(len(channel.subscribers) for channel in self._channels.values())

    async def subscribe(
        self,
        scope: Scope,
        after: str | None,
        resources: frozenset[Resource] = frozenset(Resource),
        *,
        board: bool = False,
        on_ended: Callable[[Ending], None] = lambda why: None,
    ) -> Subscriber:
        """A subscriber to the department of ``scope``: from the event after the cursor
        ``after`` (the feed's, as each event's ``cursor`` carries it), else from now on.
        Raises Invalid for a cursor that is not one. ``on_ended`` is told when the hub ends
        the subscription (a slow consumer, the server stopping), on the event loop."""
        department_id = department_of(scope)
        position = None if after is None else events.position_after(after, ALL_TYPES)
        channel = await self._channel(Scope(scope.tenant_id, scope.schema, department_id))
        start = channel.head if position is None else position
        subscriber = Subscriber(self, channel, start, resources, board, on_ended, scope)
        # Nothing to catch up on: the channel gives it what follows from now on.
        subscriber.live = start >= channel.head
        # In the channel before the board's read: the channel is not dropped meanwhile, and a
        # board it gives after a change is newer than this one.
        channel.subscribers.add(subscriber)
        if board:
            try:
                first = await self._board(channel)
            except BaseException:
                self.unsubscribe(subscriber)
                raise
            if subscriber.pending_board() is None:
                subscriber.give_board(first)
        return subscriber

    async def _channel(self, scope: Scope) -> Channel:
        """The department's channel, made (its head read) if there is none yet."""
        key = (scope.schema, department_of(scope))
        while True:
            channel = self._channels.get(key)
            if channel is None:
                channel = Channel(scope)
                self._channels[key] = channel
                self._by_schema.setdefault(scope.schema, set()).add(channel)
                try:
                    channel.head = await self.database.run(scope, _last_position)
                except BaseException:
                    # Forgotten: those waiting for it make one anew.
                    self._forget(channel)
                    raise
                finally:
                    channel.ready.set()
                return channel
            await channel.ready.wait()
            if self._channels.get(key) is channel:
                return channel

    def unsubscribe(self, subscriber: Subscriber) -> None:
        channel = subscriber.channel
        channel.subscribers.discard(subscriber)
        self._drop_if_unused(channel)

    def _drop_if_unused(self, channel: Channel) -> None:
        if not channel.subscribers and channel.ready.is_set():
            self._forget(channel)

    def _forget(self, channel: Channel) -> None:
        key = (channel.scope.schema, department_of(channel.scope))
        if self._channels.get(key) is channel:
            del self._channels[key]
            same_schema = self._by_schema.get(channel.scope.schema)
            if same_schema is not None:
                same_schema.discard(channel)
                if not same_schema:
                    del self._by_schema[channel.scope.schema]

    def announce(self, schema: str | None) -> None:
        """The tenant ``schema`` committed events (None: perhaps any tenant did, as after the
        listener reconnected): its channels read on. Call it on the event loop."""
        if schema is None:
            channels = list(self._channels.values())
        else:
            channels = list(self._by_schema.get(schema, ()))
        for channel in channels:
            self._refresh(channel)

    def _refresh(self, channel: Channel) -> None:
        if channel.reading:
            channel.again = True
            return
        channel.reading = True
        task = asyncio.get_running_loop().create_task(self._read_on(channel))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_on(self, channel: Channel) -> None:
        try:
            await channel.ready.wait()
            while channel.subscribers:
                channel.again = False
                found, board = await self.database.run(
                    channel.scope, lambda uow: self._new_events(uow, channel)
                )
                if found:
                    channel.head = found[-1].position
                for subscriber in list(channel.subscribers):
                    if subscriber.live:
                        subscriber.give(found)
                if board is not None:
                    for subscriber in list(channel.subscribers):
                        if subscriber.board:
                            subscriber.give_board(board)
                if len(found) < PAGE_SIZE and not channel.again:
                    return
        except Exception:
            # The next announcement (or the periodic one) reads again from the same head.
            log.exception("live_channel_read_failed", schema=channel.scope.schema)
        finally:
            channel.reading = False

    def _new_events(
        self, uow: UnitOfWork, channel: Channel
    ) -> tuple[list[Event], BoardUpdate | None]:
        page = events.feed(uow, ALL_TYPES, PAGE_SIZE, events.cursor_at(channel.head, ALL_TYPES))
        found = page.items
        board = None
        wants_board = any(subscriber.board for subscriber in channel.subscribers)
        if wants_board and any(resource_of(event) is Resource.DEAL for event in found):
            board = BoardUpdate(found[-1].position, pipeline.board(uow))
        return found, board

    async def read_after(self, channel: Channel, position: int) -> list[Event]:
        """A page of the department's events after ``position`` (a subscriber catching up)."""

        def read(uow: UnitOfWork) -> list[Event]:
            cursor = events.cursor_at(position, ALL_TYPES)
            return events.feed(uow, ALL_TYPES, PAGE_SIZE, cursor).items

        return await self.database.run(channel.scope, read)

    async def _board(self, channel: Channel) -> BoardUpdate:
        def read(uow: UnitOfWork) -> BoardUpdate:
            return BoardUpdate(channel.head, pipeline.board(uow))

        return await self.database.run(channel.scope, read)

    def end_all(self, why: Ending) -> None:
        """Ends every subscription (the server is stopping)."""
        self.stopping = True
        for channel in list(self._channels.values()):
            for subscriber in list(channel.subscribers):
                subscriber.end(why)

    async def close(self) -> None:
        self.end_all(Ending.SHUTDOWN)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _last_position(uow: UnitOfWork) -> int:
    """The department's last position, once the events committed so far are numbered."""
    department_id = department_of(uow.scope)
    events.number_all_committed(uow, [department_id])
    found: Any = uow.connection.execute(
        select(event_positions.c.last_position).where(
            event_positions.c.department_id == department_id
        )
    ).scalar()
    return int(found or 0)
