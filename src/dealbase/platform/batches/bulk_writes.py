"""A batch's creates and upserts of a record written in bulk (customers, activities), or a single
upsert of one, as one statement that travels with its unit of work's COMMIT (on a distributed
schema, ``routed_writes`` instead): the writes judged (``upserts.judged``: the records they
name locked and read), the new records inserted, the changed ones written, their events
recorded in the order of the writes, and one row a write answered.

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

It answers a row a write: its ``ordinal``, ``verdict``, ``known_<field>`` checks, the record
as it now is, whether it wrote, and whether the worker is to be woken. A write that wrote nothing answers as
judged (the record it named, as found: unchanged, or failed; an atomic batch's writes all so
when one failed); a new record with a null ordinal (its id, the write's new id, tells its
write); a changed one as written.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Integer,
    Table,
    Text,
    and_,
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
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE, CompoundSelect, NamedFromClause

from dealbase.db.statements import Kept, built_once
from dealbase.platform.batches import upserts
from dealbase.platform.batches.upserts import CHANGE, DEPARTMENT, INSERT, UNCHANGED, Judging
from dealbase.platform.events.repository import recorded_rows
from dealbase.platform.record_changes import JsonSql, previous_values, shown_names

# By the record's table: a tenant's with its custom fields' columns is a record of its own.
_BUILT: Kept[tuple[Table, str, bool], CompoundSelect[Any]] = Kept()


def statement(
    judging: Judging, noun: str, json_sql: JsonSql, *, atomic: bool
) -> CompoundSelect[Any]:
    """The statement of a record's writes (its ``upserts.parameters``), built once per record
    and atomicity."""
    return _BUILT.get(
        (*judging.built_as, atomic),
        lambda: built_once(_statement(judging, noun, json_sql, atomic=atomic)),
    )


def _statement(
    judging: Judging, noun: str, json_sql: JsonSql, *, atomic: bool
) -> CompoundSelect[Any]:
    judged = upserts.judged(judging, shown_before=json_sql)
    writable = _writable(judging, judged, atomic=atomic)
    department_id = bindparam(DEPARTMENT, type_=judging.table.c.department_id.type)
    inserted = _inserted(judging, judged, writable, department_id)
    updated = _updated(judging, judged, writable)
    recorded, wakes = recorded_rows(
        _events(noun, judging.table, json_sql, inserted, updated), department_id
    )
    return _answered(judging, judged, writable, inserted, updated, wakes).add_cte(recorded)


def _writable(
    judging: Judging, judged: NamedFromClause, *, atomic: bool
) -> list[ColumnElement[bool]]:
    """What a judged write must meet to be written: its references known and, in an atomic
    batch, no write failed."""
    writable: list[ColumnElement[bool]] = [upserts.references_known(judging, judged)]
    if atomic:
        each = judged.alias("each_write")
        failed = ~each.c.verdict.in_([INSERT, CHANGE, UNCHANGED]) | ~upserts.references_known(
            judging, each
        )
        writable.append(~exists().where(failed))
    return writable


def _inserted(
    judging: Judging,
    judged: NamedFromClause,
    writable: list[ColumnElement[bool]],
    department_id: ColumnElement[Any],
) -> CTE:
    """The CTE ``inserted``: the new records, in the order of their key (their external ids,
    or the unique custom field the upserts name them by): two batches inserting the same new
    keys wait for each other in the same order."""
    table = judging.table
    fields = judging.fields
    return (
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
            .order_by(judged.c[judging.key]),
        )
        .returning(*table.c)
        .cte("inserted")
    )


def _updated(judging: Judging, judged: NamedFromClause, writable: list[ColumnElement[bool]]) -> CTE:
    """The CTE ``updated``: the changed records, each a new version, with their events' ids
    and what they changed."""
    table = judging.table
    found_id = judged.c[upserts.found_column("id")]
    return (
        update(table)
        .where(table.c.id == found_id, judged.c.verdict == CHANGE, *writable)
        .values(
            {
                **changed_columns(judging, judged),
                "updated_at": func.now(),
                "version": table.c.version + 1,
            }
        )
        .returning(
            *table.c,
            judged.c.ordinal,
            judged.c.event_id,
            judged.c.changed_fields,
            judged.c.shown_before,
        )
        .cte("updated")
    )


def _events(
    noun: str,
    table: Table,
    json_sql: JsonSql,
    inserted: NamedFromClause,
    updated: NamedFromClause,
) -> CompoundSelect[Any]:
    """The events of the writes: ``<noun>.created`` of each new record, ``<noun>.updated`` of
    each changed one."""
    # A created event's id by its record's (the new id of its write): no join of two CTEs. The
    # object read once, by a subquery: as a parameter of a prepared statement, its cast would
    # be made again for every row.
    event_ids = select(cast(bindparam("event_ids", type_=Text), JSONB)).scalar_subquery()
    created_event_id = cast(event_ids.op("->>")(cast(inserted.c.id, Text)), UUID(as_uuid=True))
    created_events = select(
        created_event_id.label("id"),
        inserted.c.department_id,
        literal(f"{noun}.created", Text).label("type"),
        cast(json_sql(inserted), JSON).label("data"),
        cast(null(), ARRAY(Text)).label("changed_fields"),
        cast(null(), JSON).label("previous"),
    )
    updated_events = select(
        updated.c.event_id.label("id"),
        updated.c.department_id,
        literal(f"{noun}.updated", Text).label("type"),
        cast(json_sql(updated), JSON).label("data"),
        shown_names(updated.c.changed_fields, table).label("changed_fields"),
        previous_values(updated.c.shown_before, updated.c.changed_fields, table).label("previous"),
    )
    return union_all(created_events, updated_events)


def _answered(
    judging: Judging,
    judged: NamedFromClause,
    writable: list[ColumnElement[bool]],
    inserted: NamedFromClause,
    updated: NamedFromClause,
    wakes: ColumnElement[bool],
) -> CompoundSelect[Any]:
    """A row a write: its ordinal, verdict, ``known_<field>`` checks, the record as it now
    is, whether it wrote, and whether the worker is to be woken."""
    table = judging.table
    checks = [judged.c[f"known_{name}"] for name in judging.references]
    # The writes that wrote nothing (failed, unchanged, or of an atomic batch that failed) as
    # judged, with the record each named; then the new records, which their ids tell apart,
    # and the changed ones.
    as_judged = select(
        judged.c.ordinal,
        judged.c.verdict,
        *checks,
        *(judged.c[upserts.found_column(column.name)].label(column.name) for column in table.c),
        literal(False).label("wrote"),
        wakes.label("wakes"),
    ).where(~and_(judged.c.verdict.in_([INSERT, CHANGE]), *writable))
    wrote = [literal(True).label(check.name) for check in checks]
    return union_all(
        as_judged,
        select(
            cast(null(), Integer).label("ordinal"),
            literal(INSERT, Text).label("verdict"),
            *wrote,
            *_columns(table, inserted),
            literal(True).label("wrote"),
            wakes.label("wakes"),
        ),
        select(
            updated.c.ordinal,
            literal(CHANGE, Text),
            *wrote,
            *_columns(table, updated),
            literal(True).label("wrote"),
            wakes.label("wakes"),
        ),
    )


def changed_columns(judging: Judging, changes: NamedFromClause) -> dict[str, ColumnElement[Any]]:
    """What an UPDATE of a record's table sets each of its fields to from ``changes``, a row
    of a change (the fields it changes, ``changed_fields``, and their values): the change's
    value for those, the row's own for the others."""
    table = judging.table
    return {
        name: case(
            (literal_column(f"'{name}'") == any_(changes.c.changed_fields), changes.c[name]),
            else_=table.c[name],
        )
        for name in judging.fields
    }


def _columns(table: Table, row: Any) -> list[ColumnElement[Any]]:
    """``row``'s columns named as ``table``'s."""
    return [row.c[column.name] for column in table.c]
