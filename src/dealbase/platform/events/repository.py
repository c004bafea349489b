"""The events outbox: each transaction's events written by one statement, numbered once
committed, read in position order."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
from sqlalchemy import (
    TIMESTAMP,
    BigInteger,
    Integer,
    Text,
    bindparam,
    cast,
    column,
    delete,
    exists,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE, CompoundSelect, Select

from dealbase.db.statements import Record, built_once
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.platform.event_types import EventType
from dealbase.platform.events.models import Event, EventFilter, NewEvent
from dealbase.platform.resources import event_json_text_sql
from dealbase.platform.tables import event_sequence, events, webhook_endpoints
from dealbase.tenancy.coordination.wakeups import WAKEUP


def _record_statement() -> Select[Any]:
    recorded = (
        # One JSON text (made by orjson, bound as a text parameter), not a JSON parameter:
        # SQLAlchemy's JSON serializer and psycopg's adaptation of it cost more than the rest
        # of the statement.
        func.json_to_recordset(cast(bindparam("events", type_=Text), JSON))
        .table_valued(
            column("id", UUID(as_uuid=True)),
            column("department_id", UUID(as_uuid=True)),
            column("type", Text),
            column("data", JSON),
            column("changed_fields", ARRAY(Text)),
            column("previous", JSON),
        )
        .render_derived(name="recorded", with_types=True)
    )
    inserted = _inserted_events(
        select(
            recorded.c.id,
            recorded.c.department_id,
            recorded.c.type,
            recorded.c.data,
            recorded.c.changed_fields,
            recorded.c.previous,
        ),
        returning=True,
    )
    return select(_wakes(inserted))


def recorded_with(
    rows: CTE, event_type: EventType, data: ColumnElement[Any], department: ColumnElement[Any]
) -> tuple[CTE, ColumnElement[bool]]:
    """An event of ``event_type`` for each row of ``rows`` (a CTE that inserted them into
    ``department``, with their ``department_id``), its data ``data`` (made by PostgreSQL from
    the row) and its id the parameter ``event_id`` (one row at most): for a write that records
    its event in the same statement. Returns the events' CTE, to add to that statement (``add_cte``: nothing
    reads it), and whether the worker is to be woken (``Outbox.wake_if``)."""
    inserted = _inserted_events(
        select(
            bindparam("event_id", type_=UUID(as_uuid=True)).label("id"),
            rows.c.department_id,
            literal(event_type, Text).label("type"),
            data.label("data"),
            cast(null(), ARRAY(Text)).label("changed_fields"),
            cast(null(), JSON).label("previous"),
        ).select_from(rows),
        returning=False,
    )
    return inserted, wakes_in(department)


def recorded_rows(
    recorded: Select[Any] | CompoundSelect[Any], department: ColumnElement[Any]
) -> tuple[CTE, ColumnElement[bool]]:
    """The events ``recorded`` selects (columns named id, department_id, type, data,
    changed_fields, previous; their data made by PostgreSQL; all of ``department``), inserted by
    a CTE of the statement that writes what they record: for a write of several rows and kinds
    (a new deal and its customers). Returns the CTE, to add to that statement (``add_cte``:
    nothing reads it), and whether the worker is to be woken (``Outbox.wake_if``)."""
    return _inserted_events(recorded, returning=False), wakes_in(department)


_SEQUENCE_SETTING: ColumnElement[str] = literal_column("'dealbase.event_sequence'")


def _transaction_sequence() -> ColumnElement[int]:
    """The running transaction's number among those that record events: taken by its first
    statement that records events and kept for the others (a transaction-local setting), so
    that a transaction's events keep one number, and stay together."""
    taken = func.current_setting(_SEQUENCE_SETTING, true())
    return func.coalesce(
        cast(func.nullif(taken, ""), BigInteger),
        cast(
            func.set_config(_SEQUENCE_SETTING, cast(event_sequence.next_value(), Text), true()),
            BigInteger,
        ),
    )


def _transaction_sequence_at_once() -> ColumnElement[int]:
    """``_transaction_sequence`` for an ``INSERT ... VALUES`` Citus routes whole, which
    evaluates its functions on the coordinator, each argument of a ``COALESCE`` on its own: the
    ``set_config`` of a new number would run where the setting holds one already, and a
    transaction's later events take numbers of their own. So the setting is always set, to the
    number it holds or else the next: a number of the sequence may go unused, and the
    transaction keeps its first."""
    taken = func.nullif(func.current_setting(_SEQUENCE_SETTING, true()), "")
    kept = func.coalesce(taken, cast(event_sequence.next_value(), Text))
    return cast(func.set_config(_SEQUENCE_SETTING, kept, true()), BigInteger)


def recorded_alone(event_type: EventType, data: ColumnElement[Any]) -> Insert:
    """An insert of one event of ``event_type`` in the department the parameter
    ``department_id`` names, its id the parameter ``event_id`` and its data ``data`` (made of
    the statement's parameters): a statement of its own beside the write it records, without a
    subquery, as Citus routes it whole to the tenant's worker."""
    return _one_event(
        literal(event_type, Text), data, cast(null(), ARRAY(Text)), cast(null(), JSON)
    )


def recorded_together(
    recorded: Sequence[tuple[EventType, ColumnElement[Any], ColumnElement[Any]]],
) -> Insert:
    """``recorded_alone`` of several events, each given by its type, its id and its data (made
    of the statement's parameters), in one ``INSERT ... VALUES`` of a row each, in their order:
    for a write of several records (a deal and its new customers)."""
    return insert(events).values(
        [
            _event_row(
                event_id,
                literal(event_type, Text),
                data,
                cast(null(), ARRAY(Text)),
                cast(null(), JSON),
            )
            for event_type, event_id, data in recorded
        ]
    )


def _one_event(
    event_type: ColumnElement[str],
    data: ColumnElement[Any],
    changed_fields: ColumnElement[Any],
    previous: ColumnElement[Any],
) -> Insert:
    event_id = bindparam("event_id", type_=UUID(as_uuid=True))
    return insert(events).values(**_event_row(event_id, event_type, data, changed_fields, previous))


def _event_row(
    event_id: ColumnElement[Any],
    event_type: ColumnElement[str],
    data: ColumnElement[Any],
    changed_fields: ColumnElement[Any],
    previous: ColumnElement[Any],
    *,
    created_at: ColumnElement[Any] | None = None,
) -> dict[str, ColumnElement[Any]]:
    """An event's row, in the department the parameter ``department_id`` names, made at
    ``created_at`` (the transaction's ``now()`` unless given)."""
    return {
        "id": event_id,
        "sequence": _transaction_sequence_at_once(),
        "department_id": bindparam("department_id", type_=UUID(as_uuid=True)),
        "type": event_type,
        "data": data,
        "changed_fields": changed_fields,
        "previous": previous,
        "created_at": func.now() if created_at is None else created_at,
    }


def _inserted_events(recorded: Select[Any] | CompoundSelect[Any], *, returning: bool) -> CTE:
    """``recorded``'s events (columns named id, department_id, type, data, changed_fields,
    previous) inserted without a position: they are numbered once committed
    (``number_committed``), in the order of their transactions' ``sequence`` (an uncorrelated
    subquery), then ids. ``returning``: with each one's ``department_id``, for ``_wakes``."""
    transaction = select(_transaction_sequence()).scalar_subquery()
    given = recorded.subquery("recorded_events").c
    inserted = pg_insert(events).from_select(
        [
            "id",
            "sequence",
            "department_id",
            "type",
            "data",
            "changed_fields",
            "previous",
            "created_at",
        ],
        select(
            given.id,
            transaction,
            given.department_id,
            given.type,
            given.data,
            given.changed_fields,
            given.previous,
            func.now(),
        ),
    )
    if returning:
        return inserted.returning(events.c.department_id).cte("inserted_events")
    return inserted.cte("inserted_events")


def _wakes(inserted: CTE) -> ColumnElement[bool]:
    """Whether a webhook endpoint will want the events ``inserted`` recorded (in whichever
    departments): then the worker is woken."""
    return exists().where(
        webhook_endpoints.c.enabled,
        webhook_endpoints.c.department_id.in_(select(inserted.c.department_id)),
    )


def wakes_in(department: ColumnElement[Any]) -> ColumnElement[bool]:
    """Whether a webhook endpoint will want events recorded in ``department`` (a column or a
    parameter): for a statement whose events are all of one department, read without reading
    the events it inserts (cheaper), or beside a write whose events another statement records."""
    return exists().where(
        webhook_endpoints.c.enabled, webhook_endpoints.c.department_id == department
    )


# Whether the worker is to be woken for events recorded in the department the parameter
# ``department_id`` names (``Outbox.wake_if``), or in any of those ``departments`` names.
WAKES_IN_DEPARTMENT = built_once(
    select(wakes_in(bindparam("department_id", type_=UUID(as_uuid=True))))
)
WAKES_IN_DEPARTMENTS = built_once(
    select(
        exists().where(
            webhook_endpoints.c.enabled,
            webhook_endpoints.c.department_id
            == func.any(bindparam("departments", type_=ARRAY(UUID(as_uuid=True)))),
        )
    )
)


# Built once: the same shapes for any number of events and departments.
_RECORD = built_once(_record_statement())
# One event, its values parameters (its data and previous values JSON text): ``Outbox`` on a
# distributed schema.
_RECORD_EACH = built_once(
    _one_event(
        bindparam("type", type_=Text),
        cast(bindparam("data", type_=Text), JSON),
        bindparam("changed_fields", type_=ARRAY(Text)),
        cast(bindparam("previous", type_=Text), JSON),
    )
)


def record_texts_later(connection: TenantConnection, recorded: Sequence[Record]) -> None:
    """Events made by PostgreSQL, as ``_RECORD_EACH`` takes them (``event_id``,
    ``department_id``, ``type``, ``changed_fields``; ``data`` and ``previous`` as JSON text,
    kept as they are), inserted a statement each with the unit of work's next round trip: on a
    distributed schema, statements Citus routes whole, where the statement that made them
    cannot insert them without a subplan (``record_changes.Routed``)."""
    if recorded:
        connection.defer(_RECORD_EACH, list(recorded))


_RECORDED_AT: dict[int, Insert] = {}


def recorded_at(rows: int) -> Insert:
    """An insert of ``rows`` events given whole, all of the department the parameter
    ``department_id`` names, at the time ``created_at`` gives, one INSERT ... VALUES that Citus
    routes whole: the events of writes that wrote that time into their rows, as one statement's
    would be of its ``now()`` (``batches.routed_writes``). The n-th's id, type, data, changed
    fields and previous values (the JSON texts) are the parameters ``event_id_<n>``,
    ``type_<n>``, ``data_<n>``, ``changed_fields_<n>``, ``previous_<n>``. Built once per
    number of rows."""
    built = _RECORDED_AT.get(rows)
    if built is None:
        created_at = bindparam("created_at", type_=TIMESTAMP(timezone=True))
        built = _RECORDED_AT[rows] = built_once(
            insert(events).values(
                [
                    _event_row(
                        bindparam(f"event_id_{n}", type_=UUID(as_uuid=True)),
                        bindparam(f"type_{n}", type_=Text),
                        cast(bindparam(f"data_{n}", type_=Text), JSON),
                        bindparam(f"changed_fields_{n}", type_=ARRAY(Text)),
                        cast(bindparam(f"previous_{n}", type_=Text), JSON),
                        created_at=created_at,
                    )
                    for n in range(rows)
                ]
            )
        )
    return built


# Told the tenant schema of each transaction that committed events, right after its COMMIT, on
# the thread that committed (a server's live subscriptions announce it to every server process:
# platform.live). Each must be cheap and must not raise: the write has committed.
committed_listeners: list[Callable[[str], None]] = []


class Outbox:
    """The events of one transaction, written by a statement sent with its COMMIT. They take no
    lock a department's other writers wait for: they get their positions once committed.

    When an enabled webhook endpoint is in one of their departments, the worker is woken once
    the events have committed, by a transaction of one statement: the answer comes with the
    COMMIT, so the wakeup cannot travel in its round trip. A process that stops between the two,
    or a wakeup that fails (logged, not raised: the write has committed), leaves the events to
    the tenant's next wakeup.
    """

    def __init__(self) -> None:
        self.pending: list[NewEvent] = []
        # The transaction's tenant schema, for ``committed_listeners``.
        self.schema: str | None = None
        # Once committed, whether each statement that recorded events wants the worker woken.
        self._wakes: list[Callable[[], bool]] = []

    def wake_if(self, wakes: Callable[[], bool]) -> None:
        """Events a write's own statement recorded (``recorded_with``): ``wakes`` says, once
        committed, whether the worker is to be woken for them."""
        self._wakes.append(wakes)

    def before_commit(self, connection: TenantConnection) -> None:
        if not self.pending:
            return
        rows = [
            {
                "id": event.id,
                "department_id": event.department_id,
                "type": event.type,
                "data": event.data,
                "changed_fields": event.changed_fields,
                "previous": event.previous,
            }
            for event in self.pending
        ]
        if connection.distributed:
            wakes = self._record_each(connection)
        else:
            recorded = connection.defer(_RECORD, {"events": orjson.dumps(rows).decode()})
            wakes = recorded
        self._wakes.append(lambda: bool(wakes.rows().scalar()))
        self.pending.clear()

    def _record_each(self, connection: TenantConnection) -> Deferred:
        """The events, a statement each (in one round trip), and whether the worker is to be
        woken for them: statements Citus routes whole, where ``_RECORD`` inserts from a set of
        rows the coordinator makes."""
        connection.defer(
            _RECORD_EACH,
            [
                {
                    "event_id": event.id,
                    "department_id": event.department_id,
                    "type": event.type,
                    "data": orjson.dumps(event.data).decode(),
                    "changed_fields": event.changed_fields,
                    "previous": None
                    if event.previous is None
                    else orjson.dumps(event.previous).decode(),
                }
                for event in self.pending
            ],
        )
        departments = sorted({event.department_id for event in self.pending})
        return connection.defer(WAKES_IN_DEPARTMENTS, {"departments": departments})

    def after_commit(self, connection: TenantConnection) -> None:
        if self.schema is not None:
            for listener in committed_listeners:
                listener(self.schema)
        if any(wakes() for wakes in self._wakes):
            connection.execute_after_commit(WAKEUP, {})


# What an event is to its readers; ``sequence`` only orders the numbering.
_READ = tuple(column for column in events.c if column.name != "sequence")


def _to_event(row: Record, tenant_id: uuid.UUID) -> Event:
    return Event(tenant_id=tenant_id, **row)


@dataclass(frozen=True, slots=True)
class FeedRead:
    """A read of the feed: up to ``limit`` of the department's events after the position,
    created within ``since``."""

    tenant_id: uuid.UUID
    department_id: uuid.UUID
    after_position: int
    filters: EventFilter
    limit: int
    since: timedelta

    def deferred(self, connection: TenantConnection, *, as_json: bool) -> Deferred:
        """The read, sent with the next round trip."""
        query = _events_after(
            as_json=as_json, typed=self.filters.types is not None, since=self.since
        )
        values: dict[str, object] = {
            "department_id": self.department_id,
            "after_position": self.after_position,
            "limit": self.limit,
        }
        if self.filters.types is not None:
            values["types"] = list(self.filters.types)
        if as_json:
            values["tenant_id"] = str(self.tenant_id)
        return connection.defer(query, values)


def events_after(connection: TenantConnection, read: FeedRead) -> Callable[[], list[Event]]:
    """The feed's events: the read sent with the next round trip, its events once read."""
    rows = read.deferred(connection, as_json=False)
    return lambda: [_to_event(row, read.tenant_id) for row in rows.rows().mappings()]


def events_after_as_json(
    connection: TenantConnection, read: FeedRead
) -> Callable[[], list[tuple[int, str]]]:
    """``events_after``'s events as (position, the JSON text ``event_json`` would make, made
    by PostgreSQL)."""
    rows = read.deferred(connection, as_json=True)
    return lambda: [(position, text) for position, text in rows.rows()]


@functools.lru_cache(maxsize=8)
def _events_after(*, as_json: bool, typed: bool, since: timedelta) -> Select[Any]:
    """The feed's page: a department's events after a position (parameters ``department_id``,
    ``after_position``, ``limit``, and ``types`` when ``typed``), built once per shape, so
    that no feed read compiles its statement while the numbering's lock is held."""
    shown = select(events.c.position, event_json_text_sql(events)) if as_json else select(*_READ)
    query = shown.where(
        events.c.department_id == bindparam("department_id", type_=UUID(as_uuid=True)),
        events.c.position > bindparam("after_position", type_=BigInteger),
        events.c.created_at > func.now() - since,
    )
    if typed:
        query = query.where(events.c.type == func.any(bindparam("types", type_=ARRAY(Text))))
    return built_once(query.order_by(events.c.position).limit(bindparam("limit", type_=Integer)))


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
