"""A batch's creates and upserts of a record written in bulk (customers, activities), or a single
upsert of one, on a distributed schema: plain statements Citus routes whole to the tenant's
worker, where ``bulk_writes``' one statement of data-modifying CTEs runs as subplans whose rows
go through the coordinator. Two round trips whatever the number of writes, where the single
server's statement travels with the COMMIT: the writes need the verdicts.

1. The judging SELECT (``upserts.judged`` of subqueries, which Citus routes whole, where it
   makes a CTE that locks rows a subplan): each write's verdict and the record it names, locked,
   the values the write gives as PostgreSQL reads them, a change's previous values
   (``record_changes.previous_values``, the same JSON text as on a single server) and the
   transaction's time (``now()`` on the worker).
2. With the COMMIT: the new records (INSERT ... VALUES of many rows, in external id order:
   two batches inserting the same new ids wait for each other in the same order), the changed
   ones (one UPDATE ... FROM the changes), their events (INSERT ... VALUES of many rows, with
   the ids ``upserts.parameters`` gave them, ``events.repository.recorded_at``) and whether the
   worker is to be woken.

An event's data is its record's JSON made of its row as the writes leave it (``shown``, the
record's own rule, as an activity's create makes its event's): neither an INSERT ... VALUES nor
a RETURNING may hold the subquery PostgreSQL's JSON of a row is, and an INSERT ... SELECT of the
events from the rows written goes through the coordinator (their number and time are functions
it computes). So the rows are written with the time the judging statement read, not a
``now()`` of their own (which Citus would compute on the coordinator, whose transaction began
earlier), and their events are recorded at that time, as on a single server. The same JSON
texts as the single server's: ``tests/citus/test_batches.py``.

The rules are ``bulk_writes``': a write that fails (``upserts.error_of``) is not written, nor
any write of an atomic batch when one fails; an insert that meets an external id another
transaction inserted after the lookup fails on the unique key (``meaning``: the unit of work
runs again); the answers are the rows that statement answers, each with its write's ordinal.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import (
    TIMESTAMP,
    Integer,
    Select,
    Table,
    Text,
    bindparam,
    case,
    cast,
    column,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, UUID
from sqlalchemy.sql.dml import ReturningInsert, ReturningUpdate

from dealbase.db.faults import ErrorMeaning
from dealbase.db.statements import Kept, Record, built_once
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.db.units import UnitOfWork
from dealbase.platform.batches import upserts
from dealbase.platform.batches.bulk_writes import changed_columns
from dealbase.platform.batches.models import Write
from dealbase.platform.batches.upserts import (
    CHANGE,
    DEPARTMENT,
    INSERT,
    Judging,
    found_column,
)
from dealbase.platform.events import service as events
from dealbase.platform.events.repository import WAKES_IN_DEPARTMENT, recorded_at
from dealbase.platform.record_changes import JsonSql, previous_values
from dealbase.platform.shapes import JsonObject, json_name

# The parameter of the writes' time: the judging statement's ``now()``.
WRITTEN_AT = "written_at"


def _judging_statement(judging: Judging, json_sql: JsonSql) -> Select[Any]:
    """Each write's ``judged`` columns that the writes and the answers read, in the order of
    the writes: the values it gives (named as their columns), the record it names (its columns
    as ``found_column`` names them), a change's ``previous`` (JSON text), and ``now``."""
    verdicts = upserts.judged(judging, shown_before=json_sql, routed=True)
    previous = case(
        (
            verdicts.c.verdict == CHANGE,
            cast(
                previous_values(verdicts.c.shown_before, verdicts.c.changed_fields, judging.table),
                Text,
            ),
        )
    )
    return select(
        verdicts.c.ordinal,
        verdicts.c.new_id,
        verdicts.c.event_id,
        verdicts.c.external_id,
        verdicts.c.verdict,
        verdicts.c.changed_fields,
        *(verdicts.c[f"known_{name}"] for name in judging.references),
        *(verdicts.c[name] for name in judging.fields),
        *(verdicts.c[found_column(each.name)] for each in judging.table.c),
        previous.label("previous"),
        func.now().label("now"),
    ).order_by(verdicts.c.ordinal)


def _insert_statement(judging: Judging, rows: int) -> ReturningInsert[Any]:
    """``rows`` new records, the n-th's values the parameters ``<column>_<n>``."""
    table = judging.table
    given = ("id", "external_id", *judging.fields)
    department_id = bindparam(DEPARTMENT, type_=table.c.department_id.type)
    written_at = bindparam(WRITTEN_AT, type_=TIMESTAMP(timezone=True))
    return (
        insert(table)
        .values(
            [
                {
                    **{name: bindparam(f"{name}_{n}", type_=table.c[name].type) for name in given},
                    "department_id": department_id,
                    "created_at": written_at,
                    "updated_at": written_at,
                }
                for n in range(rows)
            ]
        )
        .returning(*table.c)
    )


def _update_statement(judging: Judging) -> ReturningUpdate[Any]:
    """The changes (the parameter ``changes``, a JSON array: each record's id, its write's
    ordinal, the fields it changes and their values) written, one statement for all."""
    table = judging.table
    changes = (
        func.json_to_recordset(cast(bindparam("changes", type_=Text), JSON))
        .table_valued(
            column("id", UUID(as_uuid=True)),
            column("ordinal", Integer),
            column("changed_fields", ARRAY(Text)),
            *(column(name, table.c[name].type) for name in judging.fields),
        )
        .render_derived(name="changes", with_types=True)
    )
    return (
        update(table)
        .where(
            table.c.id == changes.c.id,
            table.c.department_id == bindparam(DEPARTMENT, type_=table.c.department_id.type),
        )
        .values(
            {
                **changed_columns(judging, changes),
                "updated_at": bindparam(WRITTEN_AT, type_=TIMESTAMP(timezone=True)),
                "version": table.c.version + 1,
            }
        )
        .returning(*table.c, changes.c.ordinal)
    )


# The rows of an INSERT ... VALUES at most, and the other numbers of rows one is built for: a
# batch's new records, and its events, go in as few statements as there are ones in the binary
# digits of their number (a thousand: seven), each built once. One statement a row made a
# thousand new customers cost Citus's coordinator four times the CPU of one statement for all.
_ROWS = (256, 128, 64, 32, 16, 8, 4, 2, 1)


def _in_statements(rows: Sequence[Record]) -> Iterator[Sequence[Record]]:
    start = 0
    for size in _ROWS:
        while len(rows) - start >= size:
            yield rows[start : start + size]
            start += size


def _numbered(rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """The values of rows of an INSERT ... VALUES, the n-th's named ``<name>_<n>``."""
    return {f"{name}_{n}": value for n, row in enumerate(rows) for name, value in row.items()}


# Built once per record (its table: a tenant's with its custom fields' columns is a record of
# its own), and number of rows; bounded.
_JUDGING: Kept[tuple[Table, str], Select[Any]] = Kept()
_UPDATE: Kept[tuple[Table, str], ReturningUpdate[Any]] = Kept()
_INSERT: Kept[tuple[Table, str, int], ReturningInsert[Any]] = Kept()


def _judging(judging: Judging, json_sql: JsonSql) -> Select[Any]:
    return _JUDGING.get(judging.built_as, lambda: built_once(_judging_statement(judging, json_sql)))


def _update(judging: Judging) -> ReturningUpdate[Any]:
    return _UPDATE.get(judging.built_as, lambda: built_once(_update_statement(judging)))


def _insert(judging: Judging, rows: int) -> ReturningInsert[Any]:
    return _INSERT.get(
        (*judging.built_as, rows), lambda: built_once(_insert_statement(judging, rows))
    )


def write(
    uow: UnitOfWork,
    judging: Judging,
    noun: str,
    json_sql: JsonSql,
    writes: Sequence[Write[Any]],
    department_id: uuid.UUID,
    *,
    atomic: bool,
    shown: Callable[[Record], JsonObject],
    meaning: ErrorMeaning,
) -> Callable[[], list[Record]]:
    """Judges ``writes`` now and sends their writes with the unit of work's next round trip;
    returns what reads, once that has gone, the rows ``bulk_writes``' statement would answer
    (each with its write's ``ordinal``). ``shown`` is the record's JSON of a row of its table,
    its events' data; ``meaning``, what an insert's failure means."""
    connection = uow.connection
    judgement = upserts.parameters(judging, writes, department_id, uow.scope.tenant_id)
    judged = list(connection.execute(_judging(judging, json_sql), judgement.values).mappings())
    by_index = {write.index: write for write in writes}
    writing = _writing(judging, noun, judged, by_index, atomic=atomic)
    if not writing:
        return lambda: [_as_judged(judging, row) for row in judged]
    written_at = judged[0]["now"]
    shared = {WRITTEN_AT: written_at, DEPARTMENT: department_id}
    inserted = _insert_new(connection, judging, noun, writing, shared, meaning)
    updated = _update_changed(connection, judging, noun, writing, by_index, shared)
    recorded = [_event(noun, row, shown(_after(judging, row, department_id))) for row in writing]
    for rows in _in_statements(recorded):
        connection.defer(
            recorded_at(len(rows)),
            {**_numbered(rows), "department_id": department_id, "created_at": written_at},
        )
    wakes = connection.defer(WAKES_IN_DEPARTMENT, {"department_id": department_id})
    events.recorded_by_statement(uow, lambda: bool(wakes.rows().scalar()))
    return lambda: _answered(judging, judged, writing, inserted, updated)


def _writing(
    judging: Judging,
    noun: str,
    judged: list[Record],
    by_index: Mapping[int, Write[Any]],
    *,
    atomic: bool,
) -> list[Record]:
    """The judged writes that write: inserts and changes that did not fail, none of an atomic
    batch when one failed."""
    failed = {
        row["ordinal"]
        for row in judged
        if upserts.error_of(noun, by_index[row["ordinal"]], row["verdict"], row, judging)
    }
    return [
        row
        for row in judged
        if row["verdict"] in (INSERT, CHANGE)
        and row["ordinal"] not in failed
        and not (atomic and failed)
    ]


def _insert_new(
    connection: TenantConnection,
    judging: Judging,
    noun: str,
    writing: list[Record],
    shared: Mapping[str, object],
    meaning: ErrorMeaning,
) -> list[Deferred]:
    """Defers the inserts of the new records, in the order of their key (their external ids,
    or the unique custom field the upserts name them by)."""
    key = judging.key
    new = sorted(
        (_new(judging, row) for row in writing if row["verdict"] == INSERT),
        key=lambda row: (row[key] is None, row[key] or ""),
    )
    return [
        connection.defer(
            _insert(judging, len(rows)), {**_numbered(rows), **shared}, meaning=meaning
        )
        for rows in _in_statements(new)
    ]


def _update_changed(
    connection: TenantConnection,
    judging: Judging,
    noun: str,
    writing: list[Record],
    by_index: Mapping[int, Write[Any]],
    shared: Mapping[str, object],
) -> Deferred | None:
    """Defers the UPDATE of the changed records, if any."""
    changes = [
        _change(by_index[row["ordinal"]], row) for row in writing if row["verdict"] == CHANGE
    ]
    if not changes:
        return None
    return connection.defer(_update(judging), {"changes": orjson.dumps(changes).decode(), **shared})


def _new(judging: Judging, row: Mapping[str, Any]) -> Record:
    """A new record's values, as the judging statement read them from its write."""
    return {
        "id": row["new_id"],
        "external_id": row["external_id"],
        **{name: row[name] for name in judging.fields},
    }


def _change(write: Write[Any], row: Mapping[str, Any]) -> dict[str, object]:
    """A changed record's row of the UPDATE's ``changes``: its fields' values as the judging
    statement was given them (``upserts.parameters``)."""
    changed = set(row["changed_fields"])
    values = {
        name: value
        for name, value in write.fields.model_dump(mode="json").items()
        if name in changed
    }
    return {
        **values,
        "id": str(row[found_column("id")]),
        "ordinal": row["ordinal"],
        "changed_fields": row["changed_fields"],
    }


def _after(judging: Judging, row: Mapping[str, Any], department_id: uuid.UUID) -> Record:
    """The row of the record a write writes, as it will be (its time the judging statement's)."""
    table = judging.table
    if row["verdict"] == INSERT:
        return {
            **{each.name: None for each in table.c},
            **{name: row[name] for name in judging.fields},
            "id": row["new_id"],
            "external_id": row["external_id"],
            "department_id": department_id,
            "created_at": row["now"],
            "updated_at": row["now"],
            "version": 1,
        }
    found = _found(judging, row)
    return {
        **found,
        **{name: row[name] for name in row["changed_fields"]},
        "updated_at": row["now"],
        "version": found["version"] + 1,
    }


def _event(noun: str, row: Mapping[str, Any], data: JsonObject) -> dict[str, object]:
    """A write's event: ``<noun>.created`` or ``<noun>.updated``, ``data`` its record's JSON."""
    created = row["verdict"] == INSERT
    return {
        "event_id": row["event_id"],
        "type": f"{noun}.created" if created else f"{noun}.updated",
        "data": orjson.dumps(data).decode(),
        "changed_fields": None if created else [json_name(name) for name in row["changed_fields"]],
        "previous": None if created else row["previous"],
    }


def _found(judging: Judging, row: Mapping[str, Any]) -> Record:
    """The record a write names, as found (all null when none), by its columns' names."""
    return {each.name: row[found_column(each.name)] for each in judging.table.c}


def _as_judged(judging: Judging, row: Mapping[str, Any]) -> Record:
    """A write that wrote nothing, answered as judged, with the record it names as found."""
    checks = {f"known_{name}": row[f"known_{name}"] for name in judging.references}
    return {
        "ordinal": row["ordinal"],
        "verdict": row["verdict"],
        **checks,
        **_found(judging, row),
        "wrote": False,
    }


def _answered(
    judging: Judging,
    judged: list[Record],
    writing: list[Record],
    inserted: list[Deferred],
    updated: Deferred | None,
) -> list[Record]:
    written = {row["ordinal"] for row in writing}
    answered = [_as_judged(judging, row) for row in judged if row["ordinal"] not in written]
    wrote = {f"known_{name}": True for name in judging.references} | {"wrote": True}
    new = {row["new_id"]: row["ordinal"] for row in writing if row["verdict"] == INSERT}
    for each in inserted:
        answered.extend(
            {**row, "ordinal": new[row["id"]], "verdict": INSERT, **wrote}
            for row in each.rows().mappings()
        )
    if updated is not None:
        answered.extend({**row, "verdict": CHANGE, **wrote} for row in updated.rows().mappings())
    return answered
