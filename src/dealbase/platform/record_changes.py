"""A synced record's change (a PATCH, or an upsert that finds its record) as one statement: the
row locked and read, its references judged, the new version written, the events recorded with
what PostgreSQL computes of the record's JSON before and after, and the answer, so that the
change travels with its unit of work's COMMIT, one round trip in all.

The statement, by its CTEs:

- ``locked``: the row (of the caller's department, when it has one), locked (``FOR UPDATE``),
  with its JSON as it is (``shown_before``) and, for each reference the change gives, whether
  the id names a row of the record's department, or none (``known_<field>``);
- ``written``: the UPDATE, only if the row is at a version ``expected`` admits and every
  reference is known, returning the row as it now is;
- ``shown``, ``changed``: the row after with its JSON (``shown``, made once) and the fields
  whose JSON value differs from before (``changed_fields``, in the order the change gives
  them);
- the events, inserted without being read: ``<noun>.updated`` when a field changed, and each
  field event whose field did.

It answers one row when the row was found (none: the record is not the caller's): its
reference checks, then ``changed``'s columns, all null when the UPDATE wrote nothing (a version
the caller did not expect, or an unknown reference), and whether the worker is to be woken for
the events.

On a Citus distributed schema each data-modifying CTE would be a subplan, its rows pulled
through the coordinator. There the change is ``routed``: the UPDATE of ``locked`` (a subquery)
makes in its RETURNING what ``shown``, ``changed`` and the events' CTEs make (the same
builders), and the events it made are inserted by statements of their own, as the outbox
inserts its events there, once its answer is back: a second round trip. Answers, errors and
events are the same on both (``tests/citus/test_record_changes.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    Table,
    Text,
    any_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB, UUID, array
from sqlalchemy.sql.dml import ReturningUpdate, Update
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.sql.selectable import CompoundSelect, FromClause, NamedFromClause, ScalarSelect

from dealbase.db.statements import Kept, Record, built_once
from dealbase.platform.event_types import EventType
from dealbase.platform.events.repository import recorded_rows, wakes_in
from dealbase.platform.shapes import (
    CUSTOM_COLUMN_PREFIX,
    CUSTOM_FIELDS,
    has_custom_columns,
    json_name,
)

# The record's JSON made by PostgreSQL from a row of its table, or of a CTE returning its
# columns, as text (``shapes.Shape.text_of_row``).
JsonSql = Callable[[NamedFromClause], ColumnElement[str]]


@dataclass(frozen=True)
class ChangedRecord:
    """What is particular to one record's change statement."""

    table: Table
    noun: str
    json_sql: JsonSql
    # Each field that names a row of another table, which must be of the record's department.
    references: Mapping[str, Table]
    # Events a change of one field is besides ``<noun>.updated``.
    field_events: tuple[tuple[str, EventType], ...]


@dataclass(frozen=True)
class Shape:
    """What a change statement's text depends on: the fields it gives, whether the caller has a
    department, whether it names the versions it expects."""

    fields: tuple[str, ...]
    one_department: bool
    versioned: bool


# By the record's table and the shape: as many as the sets of fields clients send, bounded.
_BUILT: Kept[tuple[Table, Shape], Select[Any]] = Kept()


def statement(record: ChangedRecord, shape: Shape) -> Select[Any]:
    """The change statement of ``record`` for ``shape``, built once."""
    return _BUILT.get((record.table, shape), lambda: built_once(_statement(record, shape)))


def event_ids(record: ChangedRecord, shape: Shape) -> list[str]:
    """The names of the parameters that carry the ids of the events the statement may record:
    ``<noun>.updated``'s first, then each field event's whose field the change gives."""
    given = [name for name, _ in record.field_events if name in shape.fields]
    return ["event_updated", *(f"event_{name}" for name in given)]


def parameters(
    shape: Shape,
    record_id: uuid.UUID,
    department_id: uuid.UUID | None,
    changes: Mapping[str, object],
    versions: frozenset[int] | None,
    event_names: Sequence[str],
    new_event_ids: Sequence[uuid.UUID],
    tenant_id: uuid.UUID,
) -> dict[str, object]:
    """The values of a change statement of ``shape``."""
    values: dict[str, object] = {**changes, "record_id": record_id, "tenant_id": str(tenant_id)}
    if shape.one_department:
        values["caller_department_id"] = department_id
    if shape.versioned:
        values["versions"] = sorted(versions or ())
    values.update(zip(event_names, new_event_ids, strict=True))
    return values


def _statement(record: ChangedRecord, shape: Shape) -> Select[Any]:
    table = record.table
    given = _given(record, shape)
    locked = _locked(record, shape, given).cte("locked")
    written = (
        _written(record, shape, given, locked)
        .returning(*table.c, locked.c.shown_before)
        .cte("written")
    )
    # The JSON after, made once (a deal's reads its employee and customers).
    shown = select(written, record.json_sql(written).label("shown")).cte("shown")
    changed = select(shown, _changed_fields(shown, shape.fields).label("changed_fields")).cte(
        "changed"
    )
    recorded, wakes = recorded_rows(_events(record, shape, changed), locked.c.department_id)
    return (
        select(
            *(locked.c[f"known_{name}"] for name in _checked(record, shape)),
            *(changed.c[column.name] for column in table.c),
            changed.c.shown,
            changed.c.changed_fields,
            wakes.label("wakes"),
        )
        .select_from(locked.outerjoin(changed, true()))
        .add_cte(recorded)
    )


def _given(record: ChangedRecord, shape: Shape) -> dict[str, BindParameter[Any]]:
    """The values the change gives, as parameters named after their columns."""
    return {name: bindparam(name, type_=record.table.c[name].type) for name in shape.fields}


def _checked(record: ChangedRecord, shape: Shape) -> list[str]:
    """The references the change gives."""
    return [name for name in record.references if name in shape.fields]


def _known(
    record: ChangedRecord, shape: Shape, given: Mapping[str, BindParameter[Any]]
) -> list[ColumnElement[bool]]:
    """For each reference the change gives, whether it names a row of the record's department,
    or none (``known_<field>``)."""
    table = record.table
    return [
        or_(
            given[name].is_(None),
            exists().where(
                record.references[name].c.id == given[name],
                record.references[name].c.department_id == table.c.department_id,
            ),
        ).label(f"known_{name}")
        for name in _checked(record, shape)
    ]


def _owned(record: ChangedRecord, shape: Shape) -> list[ColumnElement[bool]]:
    """The record's row, of the caller's department when it has one."""
    table = record.table
    return [
        table.c.id == bindparam("record_id", type_=table.c.id.type),
        # Not ``department_id``: a parameter named as a column of the table would be one
        # more column the UPDATE sets.
        table.c.department_id == bindparam("caller_department_id", type_=table.c.id.type)
        if shape.one_department
        else true(),
    ]


def _locked(
    record: ChangedRecord, shape: Shape, given: Mapping[str, BindParameter[Any]]
) -> Select[Any]:
    """The row, locked, with its JSON as it is (``shown_before``) and its references' checks."""
    table = record.table
    return (
        select(
            *table.c, record.json_sql(table).label("shown_before"), *_known(record, shape, given)
        )
        .where(*_owned(record, shape))
        .with_for_update(of=table)
    )


def _written(
    record: ChangedRecord,
    shape: Shape,
    given: Mapping[str, BindParameter[Any]],
    locked: FromClause,
) -> Update:
    """The new version of the ``locked`` row, only if it is at a version ``expected`` admits
    and every reference is known."""
    table = record.table
    conditions: list[ColumnElement[bool]] = [table.c.id == locked.c.id]
    conditions.extend(locked.c[f"known_{name}"] for name in _checked(record, shape))
    if shape.versioned:
        conditions.append(table.c.version == any_(bindparam("versions", type_=ARRAY(Integer))))
    return (
        update(table)
        .where(*conditions)
        .values({**given, "updated_at": func.now(), "version": table.c.version + 1})
    )


@dataclass(frozen=True)
class Routed:
    """A change as statements Citus routes whole to a distributed schema's worker, where the
    CTEs of ``statement`` that write would each be a subplan through the coordinator: both sent
    in one round trip (``records.SyncedRecord.change_later``)."""

    # ``_locked``'s row judged and written by one UPDATE (``locked`` its subquery), returning
    # the row and ``change``: ``{"shown": ..., "changed_fields": [...], "events": [...]}``, the
    # JSON after, the fields that changed and the events to record (``_events``' rows, as
    # ``events.repository.record_texts_later`` takes them), made by one subquery.
    update: ReturningUpdate[Any]
    # Read after it: the row's reference checks, and whether the worker is to be woken for
    # events of its department; no row when the record is not the caller's.
    check: Select[Any]


_ROUTED: Kept[tuple[Table, Shape], Routed] = Kept()


def routed(record: ChangedRecord, shape: Shape) -> Routed:
    """``statement``'s change of ``record`` for ``shape`` on a distributed schema, built once."""
    return _ROUTED.get((record.table, shape), lambda: _routed(record, shape))


def _routed(record: ChangedRecord, shape: Shape) -> Routed:
    table = record.table
    given = _given(record, shape)
    locked = _locked(record, shape, given).subquery("locked")
    written = _written(record, shape, given, locked).returning(
        *table.c, _change(record, shape, locked).label("change")
    )
    checks: list[ColumnElement[Any]] = [*_known(record, shape, given)]
    checks.append(wakes_in(table.c.department_id).label("wakes"))
    check: Select[Any] = select(*checks).where(*_owned(record, shape))
    return Routed(built_once(written), built_once(check))


def _change(record: ChangedRecord, shape: Shape, locked: FromClause) -> ScalarSelect[Any]:
    """``Routed.update``'s ``change``: what ``statement``'s ``shown``, ``changed`` and events
    make of the row it wrote, made by a subquery of its RETURNING (Citus refuses a function
    there, but not in a subquery; its CTEs are the worker's). ``shown`` is materialized: the
    JSON after is made once, not once more for each field ``changed`` compares."""
    table = record.table
    shown = (
        select(table.c.department_id, record.json_sql(table).label("shown"), locked.c.shown_before)
        .correlate(table, locked)
        .cte("shown")
        .prefix_with("MATERIALIZED")
    )
    changed = select(shown, _changed_fields(shown, shape.fields).label("changed_fields")).cte(
        "changed"
    )
    made = _events(record, shape, changed).subquery("made")
    recorded = select(
        made.c.id.label("event_id"),
        made.c.department_id,
        made.c.type,
        cast(made.c.data, Text).label("data"),
        made.c.changed_fields,
        cast(made.c.previous, Text).label("previous"),
    ).subquery("recorded")
    listed = select(func.json_agg(literal_column(recorded.name))).select_from(recorded)
    return (
        select(
            func.json_build_object(
                literal_column("'shown'"),
                changed.c.shown,
                literal_column("'changed_fields'"),
                changed.c.changed_fields,
                literal_column("'events'"),
                listed.scalar_subquery(),
            )
        )
        .add_cte(shown, changed, nest_here=True)
        .scalar_subquery()
    )


def routed_row(written: Record | None, check: Record | None) -> Record | None:
    """``statement``'s answer row from ``Routed``'s two, with the events to record
    (``events``)."""
    if written is None:
        if check is None:
            return None
        return {**check, "id": None, "changed_fields": None, "events": []}
    change = written["change"]
    events = [
        {
            **event,
            "event_id": uuid.UUID(event["event_id"]),
            "department_id": uuid.UUID(event["department_id"]),
        }
        for event in change["events"] or ()
    ]
    return {
        **(check or {"wakes": False}),
        **{name: value for name, value in written.items() if name != "change"},
        "shown": change["shown"],
        "changed_fields": change["changed_fields"],
        "events": events,
    }


def previous_values(
    shown_before: ColumnElement[Any], changed_fields: ColumnElement[Any], table: Table
) -> ColumnElement[Any]:
    """The ``previous`` of a ``<noun>.updated`` event: each of ``changed_fields`` with its value
    in the record's JSON text before (``shown_before``), in their order, named as ``table``'s
    event names them (``shown_names``)."""
    name = func.unnest(shown_names(changed_fields, table)).table_valued("name")
    field = name.render_derived(name="field")
    before = cast(shown_before, JSON)
    value = (
        before.op("#>")(func.string_to_array(field.c.name, literal_column("'.'")))
        if has_custom_columns(table)
        else before.op("->")(field.c.name)
    )
    return select(func.json_object_agg(field.c.name, value)).select_from(field).scalar_subquery()


def shown_names(changed_fields: ColumnElement[Any], table: Table) -> ColumnElement[Any]:
    """``changed_fields`` (columns of ``table``) as an event names them: a custom field's
    ``custom_fields.<name>`` (``shapes.json_name``)."""
    if not has_custom_columns(table):
        return changed_fields
    renamed = func.regexp_replace(
        func.unnest(changed_fields),
        literal_column(f"'^{CUSTOM_COLUMN_PREFIX}'"),
        literal_column(f"'{CUSTOM_FIELDS}.'"),
    )
    return func.array(select(renamed).scalar_subquery())


def _member(json: ColumnElement[Any], name: str) -> ColumnElement[Any]:
    """``json -> '<name>'``, or ``#>`` the path of a custom field's (the names are the read
    model's own identifiers, written as they are: no parameter per name)."""
    shown = json_name(name)
    if shown == name:
        return json.op("->")(literal_column(f"'{name}'"))
    return json.op("#>")(literal_column("'{" + shown.replace(".", ",") + "}'"))


def _changed_fields(shown: FromClause, fields: Sequence[str]) -> ColumnElement[Any]:
    """The names of ``fields`` whose JSON value differs after from before, in their order."""
    after, before = cast(shown.c.shown, JSONB), cast(shown.c.shown_before, JSONB)
    differing = [
        case(
            (
                _member(after, name).is_distinct_from(_member(before, name)),
                literal_column(f"'{name}'"),
            )
        )
        for name in fields
    ]
    if not differing:  # an empty change: a new version, no field changed
        return cast(literal_column("'{}'"), ARRAY(Text))
    return cast(func.array_remove(array(differing), null()), ARRAY(Text))


def _events(
    record: ChangedRecord, shape: Shape, changed: FromClause
) -> CompoundSelect[Any] | Select[Any]:
    """The events of the change (``recorded_rows``' columns): ``<noun>.updated`` with the fields
    that changed and their JSON values before, and each field event whose field changed, with
    that field alone."""
    before = cast(changed.c.shown_before, JSON)
    data = cast(changed.c.shown, JSON)
    previous = previous_values(changed.c.shown_before, changed.c.changed_fields, record.table)
    updated = select(
        bindparam("event_updated", type_=UUID(as_uuid=True)).label("id"),
        changed.c.department_id,
        literal(f"{record.noun}.updated", Text).label("type"),
        data.label("data"),
        shown_names(changed.c.changed_fields, record.table).label("changed_fields"),
        previous.label("previous"),
    ).where(func.cardinality(changed.c.changed_fields) > 0)
    per_field = [
        select(
            bindparam(f"event_{field}", type_=UUID(as_uuid=True)).label("id"),
            changed.c.department_id,
            literal(event_type, Text).label("type"),
            data.label("data"),
            cast(array([literal_column(f"'{field}'")]), ARRAY(Text)).label("changed_fields"),
            func.json_build_object(literal_column(f"'{field}'"), _member(before, field)).label(
                "previous"
            ),
        ).where(literal_column(f"'{field}'") == any_(changed.c.changed_fields))
        for field, event_type in record.field_events
        if field in shape.fields
    ]
    return union_all(updated, *per_field) if per_field else updated
