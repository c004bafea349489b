"""A batch's creates and upserts of a record written in bulk (customers, activities), or a single
upsert of one, as one statement that travels with its unit of work's COMMIT: the writes judged
(``upserts.judged``: the records they name locked and read), the new records inserted, the
changed ones written, their events recorded in the order of the writes, and one row a write
answered.

Its CTEs after ``judged``:

- ``inserted``: each write judged ``insert`` whose references are known, in external id order
  (two batches inserting the same new ids wait for each other in the same order). No ``ON
  CONFLICT``: an external id another transaction inserted after the lookup fails the statement
  on the unique key, and the unit of work runs again (``RunAgain``), its lookup now finding it;
- ``updated``: each write judged ``change`` whose references are known, its given fields that
  differ written, a new version;
- the events: ``<noun>.created`` of each new record, ``<noun>.updated`` of each changed one
  (the fields that changed, their values before from its JSON as it was);
- an atomic batch writes nothing when any write fails.

It answers each write's ``ordinal``, ``verdict``, ``known_<field>`` checks, and the record as
it now is (inserted, updated, or as found when unchanged; none when it failed or, in an atomic
batch, when another did), then whether the worker is to be woken.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
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
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.elements import ColumnElement

from dealbase.platform.batches import upserts
from dealbase.platform.batches.upserts import CHANGE, DEPARTMENT, INSERT, UNCHANGED, Judging
from dealbase.platform.events.repository import recorded_rows
from dealbase.platform.record_changes import JsonSql, previous_values
from dealbase.tenancy.database.statements import built_once

_BUILT: dict[tuple[str, bool], Select[Any]] = {}


def statement(
    judging: Judging, noun: str, json_sql: JsonSql, json_columns: tuple[str, ...], *, atomic: bool
) -> Select[Any]:
    """The statement of a record's writes (its parameters ``writes``, made by
    ``upserts.parameters``), built once per record and atomicity."""
    key = (noun, atomic)
    built = _BUILT.get(key)
    if built is None:
        built = _BUILT[key] = built_once(
            _statement(judging, noun, json_sql, json_columns, atomic=atomic)
        )
    return built


def _statement(
    judging: Judging, noun: str, json_sql: JsonSql, json_columns: tuple[str, ...], *, atomic: bool
) -> Select[Any]:
    table = judging.table
    # The JSON before of a changed record is made from its row as found, when it changed
    # (``previous``): not for every record a batch names, most of which a sync leaves unchanged.
    found, judged = upserts.judged(judging, [literal_column(name) for name in json_columns])
    writable: list[ColumnElement[bool]] = [upserts.references_known(judging, judged)]
    if atomic:
        each = judged.alias("each_write")
        failed = ~each.c.verdict.in_([INSERT, CHANGE, UNCHANGED]) | ~upserts.references_known(
            judging, each
        )
        writable.append(~exists().where(failed))
    department_id = bindparam(DEPARTMENT, type_=table.c.department_id.type)
    fields = judging.fields
    returned = (*table.c, *(literal_column(name) for name in json_columns))
    inserted = (
        pg_insert(table)
        .from_select(
            ["id", "external_id", *fields, "department_id", "created_at", "updated_at"],
            select(
                judged.c.new_id,
                judged.c.external_id,
                *(judged.c[name] for name in fields),
                department_id,
                func.now(),
                func.now(),
            )
            .where(judged.c.verdict == INSERT, *writable)
            .order_by(judged.c.external_id),
        )
        .returning(*returned)
        .cte("inserted")
    )
    updated = (
        update(table)
        .where(table.c.id == judged.c.found_id, judged.c.verdict == CHANGE, *writable)
        .values(
            {
                **{
                    name: case(
                        (
                            literal_column(f"'{name}'") == any_(judged.c.changed_fields),
                            judged.c[name],
                        ),
                        else_=table.c[name],
                    )
                    for name in fields
                },
                "updated_at": func.now(),
                "version": table.c.version + 1,
            }
        )
        .returning(*returned, judged.c.ordinal, judged.c.event_id, judged.c.changed_fields)
        .cte("updated")
    )
    new = inserted.join(judged, judged.c.new_id == inserted.c.id)
    created_events = select(
        judged.c.event_id.label("id"),
        inserted.c.department_id,
        literal(f"{noun}.created", Text).label("type"),
        cast(json_sql(inserted), JSON).label("data"),
        cast(null(), ARRAY(Text)).label("changed_fields"),
        cast(null(), JSON).label("previous"),
    ).select_from(new)
    updated_events = select(
        updated.c.event_id.label("id"),
        updated.c.department_id,
        literal(f"{noun}.updated", Text).label("type"),
        cast(json_sql(updated), JSON).label("data"),
        updated.c.changed_fields,
        previous_values(json_sql(found), updated.c.changed_fields).label("previous"),
    ).select_from(updated.join(found, found.c.id == updated.c.id))
    recorded, wakes = recorded_rows(union_all(created_events, updated_events), department_id)
    written = union_all(
        select(*_columns(table, inserted), judged.c.ordinal).select_from(new),
        select(*_columns(table, updated), updated.c.ordinal),
        select(*_columns(table, found), judged.c.ordinal)
        .select_from(found.join(judged, judged.c.found_id == found.c.id))
        .where(judged.c.verdict == UNCHANGED),
    ).subquery("written")
    return (
        select(
            judged.c.ordinal,
            judged.c.verdict,
            *(judged.c[f"known_{name}"] for name in judging.references),
            *_columns(table, written),
            wakes.label("wakes"),
        )
        .select_from(judged.outerjoin(written, written.c.ordinal == judged.c.ordinal))
        .order_by(judged.c.ordinal)
        .add_cte(recorded)
    )


def _columns(table: Table, row: Any) -> list[ColumnElement[Any]]:
    """``row``'s columns named as ``table``'s."""
    return [row.c[column.name] for column in table.c]
