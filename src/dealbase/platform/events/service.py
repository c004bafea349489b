"""Events: recorded by the services that change customers, deals and activities, in the same
transaction, and read back as the department's feed.

A transaction's events are written by one statement, its last before COMMIT (``Outbox``), with no
position and under no lock the department's other writers wait for. They are numbered once they
have committed, by whoever next reads them (the feed, the webhook worker, a new endpoint): under
the department's position row, each numbering gives the committed events it finds the positions
after the last. Positions therefore count up per department in commit order, and a reader that
pages by position sees every event exactly once: an event that commits later is numbered later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TypeVar

from dealbase.db.transactions import TenantConnection
from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.errors import Invalid
from dealbase.ids import new_id
from dealbase.platform.event_types import EventType
from dealbase.platform.events import numbering, repository
from dealbase.platform.events.models import (
    RETENTION_DAYS,
    EventFilter,
    EventPage,
    NewEvent,
)
from dealbase.platform.pagination import page_size
from dealbase.platform.resources import JsonObject
from dealbase.platform.validation import department_of

RETENTION = timedelta(days=RETENTION_DAYS)
R = TypeVar("R")


def record(
    uow: UnitOfWork,
    event_type: EventType,
    department_id: uuid.UUID,
    data: JsonObject,
    changed_fields: tuple[str, ...] | None = None,
    previous: JsonObject | None = None,
) -> None:
    """Adds an event to the transaction; it is written just before COMMIT, or never if the
    transaction rolls back."""
    outbox = uow.finisher(repository.Outbox)
    outbox.schema = uow.scope.schema
    outbox.pending.append(
        NewEvent(new_id(), department_id, event_type, data, changed_fields, previous)
    )


def recorded_by_statement(uow: UnitOfWork, wakes: Callable[[], bool]) -> None:
    """A write's own statement recorded its event (``repository.recorded_with``); ``wakes``
    reads, once committed, whether the worker is to be woken for it."""
    outbox = uow.finisher(repository.Outbox)
    outbox.schema = uow.scope.schema
    outbox.wake_if(wakes)


def pending_count(uow: UnitOfWork) -> int:
    """How many events the transaction holds so far (a mark for ``discard_pending_after``)."""
    return len(uow.finisher(repository.Outbox).pending)


def discard_pending_after(uow: UnitOfWork, count: int) -> None:
    """Forgets the events recorded after the first ``count``: their writes were rolled back to a
    savepoint."""
    del uow.finisher(repository.Outbox).pending[count:]


# An unpadded base64url cursor: the position (8 bytes) and a fingerprint of the filter (6).
_CURSOR_BYTES = 14
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{19}$"


def _fingerprint(filters: EventFilter) -> bytes:
    return hashlib.sha256(filters.model_dump_json().encode()).digest()[:6]


def _cursor(position: int, filters: EventFilter) -> str:
    raw = position.to_bytes(8, "big") + _fingerprint(filters)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _position_after(cursor: str, filters: EventFilter) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _CURSOR_BYTES:
        raise Invalid.of("after", "invalid_cursor", "The cursor is not one this API returned.")
    if raw[8:] != _fingerprint(filters):
        raise Invalid.of(
            "after", "invalid_cursor", "The cursor belongs to a feed with other types."
        )
    return int.from_bytes(raw[:8], "big")


def cursor_at(position: int, filters: EventFilter) -> str:
    """The feed's cursor after ``position``: what a page ending there answers as its next cursor
    (live subscriptions hand it out with each event, so that either reads on from there)."""
    return _cursor(position, filters)


def position_after(cursor: str, filters: EventFilter) -> int:
    """The position a cursor of the feed (with ``filters``) reads after; Invalid (field
    ``after``) when it is not one."""
    return _position_after(cursor, filters)


def feed(uow: UnitOfWork, filters: EventFilter, limit: int | None, after: str | None) -> EventPage:
    """The department's events of the last 30 days after the cursor, in commit order.

    Without a cursor the feed starts at the oldest event kept. The next cursor is where to poll
    from: after this page's last event, or where this page started when it is empty. Each page
    is read once the events committed so far are numbered, so it shows every event that
    committed before the request, whichever reader numbered it.
    """
    found, next_cursor = _feed(
        uow, filters, limit, after, repository.events_after, lambda event: event.position
    ).read()
    return EventPage(found, next_cursor)


def feed_as_json(
    uow: UnitOfWork, filters: EventFilter, limit: int | None, after: str | None
) -> AfterCommit[tuple[list[str], str]]:
    """``feed``'s events, each as the JSON text ``event_json`` would make, made by PostgreSQL,
    and the next cursor: read with the COMMIT, when nothing else runs."""
    page = _feed(uow, filters, limit, after, repository.events_after_as_json, lambda row: row[0])

    def texts() -> tuple[list[str], str]:
        found, next_cursor = page.read()
        return [text for _, text in found], next_cursor

    return AfterCommit(texts)


def _feed(
    uow: UnitOfWork,
    filters: EventFilter,
    limit: int | None,
    after: str | None,
    events_after: Callable[[TenantConnection, repository.FeedRead], Callable[[], list[R]]],
    position_of: Callable[[R], int],
) -> AfterCommit[tuple[list[R], str]]:
    limit = page_size(limit)
    position = 0 if after is None else _position_after(after, filters)
    scope = uow.scope
    department_id = department_of(scope)

    # Numbered first, then read: the numbering waits for any other reader numbering the same
    # department (its position row) and sees what that one committed, so the read that follows
    # (a new snapshot) holds every event committed before the request, whoever numbered it.
    # The numbering and the read travel together, so the position row is held one round trip.
    numbering.number_committed_later(uow.connection, [department_id], NUMBERING_BATCH)
    found = events_after(
        uow.connection,
        repository.FeedRead(scope.tenant_id, department_id, position, filters, limit, RETENTION),
    )

    def page() -> tuple[list[R], str]:
        rows = found()
        return rows, _cursor(position_of(rows[-1]) if rows else position, filters)

    return AfterCommit(page)


# Events numbered at most per department at a time: a reader that finds a night's sync waiting
# numbers it a few pages ahead of itself, not all at once.
NUMBERING_BATCH = 1000


def number_committed(uow: UnitOfWork, department_ids: Sequence[uuid.UUID]) -> int:
    """Numbers the committed events of those departments that have no position yet (up to
    ``NUMBERING_BATCH`` each); returns how many. Holds the departments' position rows until
    COMMIT: other readers of the same departments wait that long, writers never."""
    return numbering.number_committed(uow.connection, department_ids, NUMBERING_BATCH)


def number_all_committed(uow: UnitOfWork, department_ids: Sequence[uuid.UUID]) -> None:
    """Numbers every committed event of those departments that has no position yet: whatever
    the transaction reads next by position includes all that committed before it began."""
    while number_committed(uow, department_ids):
        pass


def purge(uow: UnitOfWork) -> int:
    """Deletes the tenant's events older than 30 days (all departments); returns how many."""
    return repository.purge_older_than(uow.connection, RETENTION)
