"""The Subscription root: a department's changes and its board, live, from the events outbox.

A subscription runs only over the live transports (``graphql_api.live``), whose context
carries the process's hub and the connection it belongs to. Sent to /graphql as a request it
is refused before it runs (``schema.DashboardSchema.execute``), and a field run with any other
context refuses itself, naming the transports.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar, cast

import strawberry
from strawberry.scalars import JSON

from dealbase.db.units import UnitOfWork
from dealbase.errors import Invalid
from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.pipeline import PipelineStep
from dealbase.graphql_api.types import GraphQLInfo
from dealbase.platform.events import service as events
from dealbase.platform.events.models import Event
from dealbase.platform.live.hub import (
    ALL_TYPES,
    BoardUpdate,
    Ended,
    Ending,
    Hub,
    Resource,
    Subscriber,
    resource_of,
)
from dealbase.platform.pipeline.models import StepTotals
from dealbase.platform.validation import department_of
from dealbase.tenancy.scope import Scope

T = TypeVar("T")

LIVE_TRANSPORTS = (
    "Subscriptions are served over WebSocket (graphql-transport-ws) at /graphql and over"
    " Server-Sent Events (graphql-sse) at /graphql/stream."
)


@dataclass
class LiveContext(GraphQLContext):
    """The context of an operation sent over a live transport."""

    hub: Hub | None = None
    # Told when the hub ends one of the connection's subscriptions (the transport closes).
    on_ended: Callable[[Ending], None] = lambda why: None
    # Set by a transport that sends a ``changes`` subscription's events itself, rendering each
    # with ``executor`` (``live``): offered the subscriber, it says whether it takes it. Taken,
    # the events bypass Strawberry's stream, which then only waits for the subscription's end.
    direct: Callable[[Subscriber], bool] | None = None
    # The subscription's executor, left here by ``live.execution.sharing_results``.
    executor: Any = None
    # Set once its operation has ended. An execution shared with other subscribers
    # (``live.execution``) may still be running on this context: it then reads in units of work
    # of its own, not in a read transaction that nobody would end.
    finished: bool = False

    async def run(self, work: Callable[[UnitOfWork], T], scope: Scope | None = None) -> T:
        if self.finished:
            return await self.database.run(scope or self.scope, work)
        return await super().run(work, scope)

    async def finish(self) -> None:
        """Ends the read transaction for good (the operation has ended)."""
        self.finished = True
        await self.close()

    @property
    def reading(self) -> bool:
        """Whether a read transaction is open (``close`` would end it)."""
        return self._reading is not None


def _live(info: GraphQLInfo) -> tuple[LiveContext, Hub]:
    context = info.context
    if not isinstance(context, LiveContext) or context.hub is None:
        raise Invalid(LIVE_TRANSPORTS)
    return context, context.hub


@strawberry.enum(description="What a change is about.")
class ChangedResource(Enum):
    CUSTOMER = "customer"
    DEAL = "deal"
    ACTIVITY = "activity"


@strawberry.enum(description="What happened to the record.")
class ChangeKind(Enum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


def _kind(event: Event) -> ChangeKind:
    action = event.type.partition(".")[2]
    if action in ("created", "deleted"):
        return ChangeKind(action)
    # deal.step_changed and deal.assigned are updates too; ``type`` tells them apart.
    return ChangeKind.UPDATED


@strawberry.type(
    description=(
        "One change of a customer, deal or activity of the department, as the events feed and"
        " webhooks carry it."
    )
)
class Change:
    cursor: str = strawberry.field(
        description=(
            "Where this change is in the department's events: pass it as `after` to resume"
            " after it (GET /events takes it too)."
        )
    )
    event_id: uuid.UUID
    type: str = strawberry.field(description="The event's type, as `deal.step_changed`.")
    resource: ChangedResource
    kind: ChangeKind
    record_id: uuid.UUID
    department_id: uuid.UUID
    record: JSON = strawberry.field(
        description=(
            "The record after the change (for a deletion, as it was), in the REST API's shape"
            " and names."
        )
    )
    changed_fields: list[str] | None = strawberry.field(
        description="For an update: the fields it changed, as `record` names them."
    )
    previous: JSON | None = strawberry.field(
        description="For an update: the changed fields' values before it."
    )
    occurred_at: datetime

    @classmethod
    def of(cls, event: Event) -> Change:
        return cls(
            cursor=events.cursor_at(event.position, ALL_TYPES),
            event_id=event.id,
            type=event.type,
            resource=ChangedResource(resource_of(event).value),
            kind=_kind(event),
            record_id=uuid.UUID(str(event.data["id"])),
            department_id=event.department_id,
            record=cast(JSON, event.data),
            changed_fields=event.changed_fields,
            previous=cast(JSON | None, event.previous),
            occurred_at=event.created_at,
        )


@strawberry.type(description="A department's board: each step with its deals' count and volume.")
class PipelineBoardUpdate:
    cursor: str = strawberry.field(
        description="The board includes at least the changes up to this cursor."
    )
    department_id: uuid.UUID
    steps: list[StepTotals] = strawberry.field(graphql_type=list[PipelineStep])

    @classmethod
    def of(cls, department_id: uuid.UUID, board: BoardUpdate) -> PipelineBoardUpdate:
        return cls(
            cursor=events.cursor_at(board.position, ALL_TYPES),
            department_id=department_id,
            steps=board.steps,
        )


async def _scope_of(context: LiveContext, department_id: uuid.UUID | None) -> Scope:
    scope = await context.scope_in(department_id)
    department_of(scope)
    # The department check's read transaction ends here: a subscription holds no connection
    # while it waits.
    await context.close()
    return scope


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description=(
            "The department's changes as they commit, in commit order (a tenant-wide key names"
            " the department). With `after`, the changes after that cursor first: none missed,"
            " none twice."
        )
    )
    async def changes(
        self,
        info: GraphQLInfo,
        department_id: uuid.UUID | None = None,
        after: str | None = None,
        resources: list[ChangedResource] | None = None,
    ) -> AsyncGenerator[Change, None]:
        # Checked before the stream starts (not in a generator's body, which a plain request
        # never runs): a plain request gets this error rather than a null.
        context, hub = _live(info)
        scope = await _scope_of(context, department_id)
        wanted = (
            frozenset(Resource)
            if resources is None
            else frozenset(Resource(resource.value) for resource in resources)
        )
        subscriber = await hub.subscribe(scope, after, wanted, on_ended=context.on_ended)
        if context.direct is not None and context.direct(subscriber):
            return _held(hub, subscriber)
        return _changes(hub, subscriber)

    @strawberry.subscription(
        description=(
            "The department's board now, then again after each change of its deals (a"
            " tenant-wide key names the department)."
        )
    )
    async def pipeline_board(
        self, info: GraphQLInfo, department_id: uuid.UUID | None = None
    ) -> AsyncGenerator[PipelineBoardUpdate, None]:
        context, hub = _live(info)
        scope = await _scope_of(context, department_id)
        subscriber = await hub.subscribe(
            scope, None, frozenset(), board=True, on_ended=context.on_ended
        )
        return _boards(hub, subscriber, department_of(scope))


# The last changes and boards made, by their event or board: the subscribers of a department
# get the same object for the same change (``live.execution`` executes each document once per
# object). Each entry keeps its source, to tell it from another that took the same id.
_MADE = 1024
_changes_made: OrderedDict[uuid.UUID, tuple[Event, Change]] = OrderedDict()
_boards_made: OrderedDict[int, tuple[BoardUpdate, PipelineBoardUpdate]] = OrderedDict()


def change_of(event: Event) -> Change:
    made = _changes_made.get(event.id)
    if made is not None and made[0] is event:
        return made[1]
    change = Change.of(event)
    _changes_made[event.id] = (event, change)
    if len(_changes_made) > _MADE:
        _changes_made.popitem(last=False)
    return change


def board_of(department_id: uuid.UUID, board: BoardUpdate) -> PipelineBoardUpdate:
    made = _boards_made.get(id(board))
    if made is not None and made[0] is board:
        return made[1]
    update = PipelineBoardUpdate.of(department_id, board)
    _boards_made[id(board)] = (board, update)
    if len(_boards_made) > _MADE:
        _boards_made.popitem(last=False)
    return update


async def _changes(hub: Hub, subscriber: Subscriber) -> AsyncGenerator[Change, None]:
    try:
        while True:
            item = await subscriber.next()
            if isinstance(item, Event):
                yield change_of(item)
    except Ended:
        # The hub ended it (a slow consumer, the server stopping): the transport closes the
        # connection with the reason, which is not an error of this operation.
        return
    finally:
        hub.unsubscribe(subscriber)


async def _held(hub: Hub, subscriber: Subscriber) -> AsyncGenerator[Change, None]:
    """The stream of a subscription whose transport sends its events itself: it yields nothing,
    and ends when the hub ends the subscription (the transport, told, closes with the reason)."""
    try:
        await subscriber.wait_ended()
    finally:
        hub.unsubscribe(subscriber)
    return
    yield  # an async generator, as Strawberry requires of a subscription


async def _boards(
    hub: Hub, subscriber: Subscriber, department_id: uuid.UUID
) -> AsyncGenerator[PipelineBoardUpdate, None]:
    try:
        while True:
            item = await subscriber.next()
            if isinstance(item, BoardUpdate):
                yield board_of(department_id, item)
    except Ended:
        return
    finally:
        hub.unsubscribe(subscriber)
