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
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CompoundSelect, FromClause, NamedFromClause

from dealbase.db.statements import built_once
from dealbase.platform.event_types import EventType
from dealbase.platform.events.repository import recorded_rows

# The record's JSON made by PostgreSQL from a row of its table, or of a CTE returning its
# columns (``resources.customer_json_kept_sql``, ``deal_json_text_sql``...), as text.
JsonSql = Callable[[NamedFromClause], ColumnElement[str]]


@dataclass(frozen=True)
class ChangedRecord:
    """What is particular to one record's change statement."""

    table: Table
    noun: str
    json_sql: JsonSql
    # Columns besides its table's that ``json_sql`` reads from a row (a customer's kept JSON).
    json_columns: tuple[str, ...]
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


_BUILT: dict[tuple[str, Shape], Select[Any]] = {}
# Shapes kept at most: as many as the sets of fields clients send, bounded by this.
_KEPT = 512


def statement(record: ChangedRecord, shape: Shape) -> Select[Any]:
    """The change statement of ``record`` for ``shape``, built once."""
    key = (record.noun, shape)
    built = _BUILT.get(key)
    if built is None:
        if len(_BUILT) >= _KEPT:
            _BUILT.clear()
        built = _BUILT[key] = built_once(_statement(record, shape))
    return built


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
    given = {name: bindparam(name, type_=table.c[name].type) for name in shape.fields}
    checked = {name: ref for name, ref in record.references.items() if name in given}
    known = [
        or_(
            given[name].is_(None),
            exists().where(ref.c.id == given[name], ref.c.department_id == table.c.department_id),
        ).label(f"known_{name}")
        for name, ref in checked.items()
    ]
    locked = (
        select(*table.c, record.json_sql(table).label("shown_before"), *known)
        .where(
            table.c.id == bindparam("record_id", type_=table.c.id.type),
            # Not ``department_id``: a parameter named as a column of the table would be one
            # more column the UPDATE sets.
            table.c.department_id == bindparam("caller_department_id", type_=table.c.id.type)
            if shape.one_department
            else true(),
        )
        .with_for_update(of=table)
        .cte("locked")
    )
    conditions: list[ColumnElement[bool]] = [table.c.id == locked.c.id]
    conditions.extend(locked.c[f"known_{name}"] for name in checked)
    if shape.versioned:
        conditions.append(table.c.version == any_(bindparam("versions", type_=ARRAY(Integer))))
    written = (
        update(table)
        .where(*conditions)
        .values({**given, "updated_at": func.now(), "version": table.c.version + 1})
        .returning(
            *table.c,
            *(literal_column(name) for name in record.json_columns),
            locked.c.shown_before,
        )
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
            *(locked.c[f"known_{name}"] for name in checked),
            *(changed.c[column.name] for column in table.c),
            changed.c.shown,
            changed.c.changed_fields,
            wakes.label("wakes"),
        )
        .select_from(locked.outerjoin(changed, true()))
        .add_cte(recorded)
    )


def previous_values(
    shown_before: ColumnElement[Any], changed_fields: ColumnElement[Any]
) -> ColumnElement[Any]:
    """The ``previous`` of a ``<noun>.updated`` event: each of ``changed_fields`` with its value
    in the record's JSON text before (``shown_before``), in their order."""
    name = func.unnest(changed_fields).table_valued("name").render_derived(name="field")
    before = cast(shown_before, JSON)
    return (
        select(func.json_object_agg(name.c.name, before.op("->")(name.c.name)))
        .select_from(name)
        .scalar_subquery()
    )


def _member(json: ColumnElement[Any], name: str) -> ColumnElement[Any]:
    """``json -> '<name>'`` (the names are the read model's own identifiers, written as they
    are: no parameter per name)."""
    return json.op("->")(literal_column(f"'{name}'"))


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
    previous = previous_values(changed.c.shown_before, changed.c.changed_fields)
    updated = select(
        bindparam("event_updated", type_=UUID(as_uuid=True)).label("id"),
        changed.c.department_id,
        literal(f"{record.noun}.updated", Text).label("type"),
        data.label("data"),
        changed.c.changed_fields,
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
