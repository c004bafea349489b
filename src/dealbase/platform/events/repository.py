"""The events outbox: each transaction's events written by one statement, read in position order."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

from sqlalchemy import BigInteger, Text, bindparam, column, delete, exists, func, select
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert

from dealbase.platform.events.models import Event, EventFilter, NewEvent
from dealbase.platform.tables import event_positions, events, webhook_endpoints
from dealbase.tenancy.statements import Record, TenantConnection
from dealbase.tenancy.wakeups import wake_worker


def _record_statement() -> object:
    # The departments' counts of new events, in department order: two transactions writing to
    # the same departments then lock their position rows in one order, never deadlocking.
    counted = (
        func.jsonb_to_recordset(bindparam("counts", type_=JSONB))
        .table_valued(column("department_id", UUID(as_uuid=True)), column("added", BigInteger))
        .render_derived(name="counted", with_types=True)
    )
    positions = pg_insert(event_positions).from_select(
        ["department_id", "last_position"],
        select(counted.c.department_id, counted.c.added).order_by(counted.c.department_id),
    )
    # Each department's row moves on by its count. The row stays locked until COMMIT, so the
    # department's next transaction numbers its events after these: positions in commit order.
    bumped = (
        positions.on_conflict_do_update(
            index_elements=[event_positions.c.department_id],
            set_={
                "last_position": event_positions.c.last_position + positions.excluded.last_position
            },
        )
        .returning(event_positions.c.department_id, event_positions.c.last_position)
        .cte("bumped")
    )
    # The events; ``back`` is how many of its department's new events come after it.
    recorded = (
        func.jsonb_to_recordset(bindparam("events", type_=JSONB))
        .table_valued(
            column("id", UUID(as_uuid=True)),
            column("department_id", UUID(as_uuid=True)),
            column("back", BigInteger),
            column("type", Text),
            column("data", JSONB),
            column("changed_fields", ARRAY(Text)),
            column("previous", JSONB),
        )
        .render_derived(name="recorded", with_types=True)
    )
    inserted = (
        pg_insert(events)
        .from_select(
            [
                "id",
                "department_id",
                "position",
                "type",
                "data",
                "changed_fields",
                "previous",
                "created_at",
            ],
            select(
                recorded.c.id,
                recorded.c.department_id,
                bumped.c.last_position - recorded.c.back,
                recorded.c.type,
                recorded.c.data,
                recorded.c.changed_fields,
                recorded.c.previous,
                func.now(),
            ).join_from(recorded, bumped, bumped.c.department_id == recorded.c.department_id),
        )
        .cte("inserted")
    )
    # Whether a webhook endpoint will want these events: then the worker is woken.
    subscribed = exists().where(
        webhook_endpoints.c.enabled,
        webhook_endpoints.c.department_id.in_(select(counted.c.department_id)),
    )
    return select(subscribed).add_cte(bumped, inserted)


# Built once: the same shape for any number of events and departments.
_RECORD = _record_statement()


class Outbox:
    """The events of one transaction, written by its last statement before COMMIT, so the lock
    on the department's position row is held for as short a time as can be. When an enabled
    webhook endpoint is in one of their departments, one more statement wakes the worker."""

    def __init__(self) -> None:
        self.pending: list[NewEvent] = []

    def before_commit(self, connection: TenantConnection) -> None:
        if not self.pending:
            return
        counts = Counter(event.department_id for event in self.pending)
        remaining = Counter(counts)
        rows = []
        for event in self.pending:
            remaining[event.department_id] -= 1
            rows.append(
                {
                    "id": str(event.id),
                    "department_id": str(event.department_id),
                    "back": remaining[event.department_id],
                    "type": event.type,
                    "data": event.data,
                    "changed_fields": event.changed_fields,
                    "previous": event.previous,
                }
            )
        subscribed = connection.execute(
            _RECORD,  # type: ignore[arg-type]
            {
                "counts": [
                    {"department_id": str(department_id), "added": added}
                    for department_id, added in counts.items()
                ],
                "events": rows,
            },
        ).scalar()
        self.pending.clear()
        if subscribed:
            wake_worker(connection)


def _to_event(row: Record, tenant_id: uuid.UUID) -> Event:
    return Event(tenant_id=tenant_id, **row)


def events_after(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID,
    after_position: int,
    filters: EventFilter,
    limit: int,
    since: timedelta,
) -> list[Event]:
    """Up to ``limit`` of the department's events after the position, created within ``since``."""
    query = select(*events.c).where(
        events.c.department_id == department_id,
        events.c.position > after_position,
        events.c.created_at > func.now() - since,
    )
    if filters.types is not None:
        query = query.where(events.c.type.in_(filters.types))
    rows = connection.execute(query.order_by(events.c.position).limit(limit)).mappings()
    return [_to_event(row, tenant_id) for row in rows]


def last_position(connection: TenantConnection, department_id: uuid.UUID) -> int:
    """The position of the department's last event (0 before its first)."""
    found = connection.execute(
        select(event_positions.c.last_position).where(
            event_positions.c.department_id == department_id
        )
    ).scalar()
    return 0 if found is None else int(found)


# Rows one purge statement deletes at most: each statement stays well within the statement
# timeout, however many a tenant has to purge.
PURGE_BATCH = 5000


def purge_older_than(connection: TenantConnection, age: timedelta) -> int:
    """Deletes the events created more than ``age`` ago (by the database's clock), a batch per
    statement; returns how many. ``events_created`` indexes ``created_at`` for it."""
    purged = 0
    while True:
        batch = (
            select(events.c.id)
            .where(events.c.created_at <= func.now() - age)
            .limit(PURGE_BATCH)
            .scalar_subquery()
        )
        deleted = len(
            connection.execute(
                delete(events).where(events.c.id.in_(batch)).returning(events.c.id)
            ).all()
        )
        purged += deleted
        if deleted < PURGE_BATCH:
            return purged
