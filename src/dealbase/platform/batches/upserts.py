"""The rules of a create or an upsert by external id, for every synced record, written once as
the SQL that judges a batch of writes (``judged``), and the errors they answer (``error_of``);
``record_writes.apply_writes`` applies them.

The records the writes name are locked and read by their external ids (``SELECT ... FOR
UPDATE``, in id order) in the statement that judges them. A record written in bulk is then
inserted or changed by the same statement (on a distributed schema, by the statements that
follow it: ``routed_writes``); one written one at a time reads the verdicts and writes each in
turn. An insert whose external id another transaction inserted after the lookup
(and committed) fails on the unique key: in bulk, the statement fails and the unit of work runs
again, its lookup now finding the record (``RunAgain``); one at a time, the insert inserts
nothing (``ON CONFLICT DO NOTHING``) and the write is judged again. So two transactions
upserting the same new external id at once leave one record, and both succeed: ``created`` and
``updated`` (or ``unchanged``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import orjson
from pydantic import BaseModel
from sqlalchemy import (
    Boolean,
    Integer,
    Select,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    column,
    exists,
    func,
    literal_column,
    null,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, UUID, array
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE, NamedFromClause, Subquery, TableValuedAlias

from dealbase.db.statements import Kept, built_once
from dealbase.errors import DomainError, ExternalIdTaken, Invalid, PreconditionFailed
from dealbase.ids import new_ids
from dealbase.platform.batches.models import Fields, Write
from dealbase.platform.record_changes import JsonSql
from dealbase.platform.versioning import Expected

# What the rules make of a write (``judged``'s ``verdict``).
INSERT = "insert"  # no record has its external id
CHANGE = "change"  # an upsert's record, whose given fields differ
UNCHANGED = "unchanged"  # an upsert's record, whose given fields are all as they are
TAKEN = "taken"  # a create's external id, another record's
MISSING = "missing"  # If-Match, and no record
UNLESS = "unless"  # If-None-Match names the record's version (or ``*``)
NOT_EXPECTED = "not_expected"  # If-Match does not name the record's version

# The parameter naming the writes' department: not ``department_id``, which a statement that
# updates a table with that column would take for one more column to set.
DEPARTMENT = "writes_department_id"


@dataclass(frozen=True)
class Judging:
    """What a record's writes are judged against: its table, its fields in its model's order
    (a change's events name them so), and the fields that name rows of other tables, which must
    be of the department."""

    table: Table
    fields: tuple[str, ...]
    references: Mapping[str, Table]
    # Columns besides its table's that a row of it is read with (a deal's employee's name).
    read_columns: tuple[ColumnElement[Any], ...] = ()
    # The column an upsert names its record by: its external id, or a unique custom field's
    # (a batch's ``upsert_key``), whose value the write's fields give.
    key: str = "external_id"

    @property
    def built_as(self) -> tuple[Table, str]:
        """What a statement made of it is kept by: its table (a tenant's with its custom
        fields' columns is one of its own) and its key."""
        return self.table, self.key


@dataclass(frozen=True)
class Judgement:
    """A statement's parameters for ``judged`` over some writes, and the id each write would
    insert its record with, by the write's index (a new record's row tells its write by it)."""

    values: dict[str, object]
    new_ids: dict[int, uuid.UUID]


def parameters(
    judging: Judging, writes: Sequence[Write[Any]], department_id: uuid.UUID, tenant_id: uuid.UUID
) -> Judgement:
    """The values of a statement made with ``judged``: the writes as one JSON text (one
    parameter whatever their number), each with the new id it would be inserted with and its
    event's id, and their fields as their model's values as JSON shows them, which PostgreSQL
    reads back as the columns' types; each new id's event id (``event_ids``, a JSON object: a
    created event's id found without joining the writes); the external ids they name; their
    department; the tenant's id (a record's JSON may show it)."""
    ids = new_ids(2 * len(writes))
    rows = []
    for number, write in enumerate(writes):
        values = write.fields.model_dump(mode="json")
        rows.append(
            {
                # A deal's create has no step nor employee: it is never compared.
                **{name: values.get(name) for name in judging.fields},
                "ordinal": write.index,
                "new_id": str(ids[2 * number]),
                "event_id": str(ids[2 * number + 1]),
                "upsert": write.upsert,
                "external_id": write.external_id,
                "given_fields": sorted(write.given),
                "has_expected": write.expected is not None,
                "expected": _versions(write.expected),
                "has_unless": write.unless is not None,
                "unless": _versions(write.unless),
            }
        )
    return Judgement(
        {
            "writes": orjson.dumps(rows).decode(),
            "event_ids": orjson.dumps({row["new_id"]: row["event_id"] for row in rows}).decode(),
            "external_ids": _keys(judging, writes),
            DEPARTMENT: department_id,
            "tenant_id": str(tenant_id),
        },
        {write.index: ids[2 * number] for number, write in enumerate(writes)},
    )


def _keys(judging: Judging, writes: Sequence[Write[Any]]) -> list[object]:
    """The values the writes name their records by (their external ids, or their values of
    the key's column)."""
    if judging.key == "external_id":
        return [write.external_id for write in writes if write.external_id is not None]
    named = (write.fields.model_dump().get(judging.key) for write in writes)
    return [value for value in named if value is not None]


def _versions(expected: Expected | None) -> list[int] | None:
    """The versions a condition names; none: any (``*``), or no condition."""
    if expected is None or expected.versions is None:
        return None
    return sorted(expected.versions)


def _given(judging: Judging) -> TableValuedAlias:
    table = judging.table
    return (
        func.json_to_recordset(cast(bindparam("writes", type_=Text), JSON))
        .table_valued(
            column("ordinal", Integer),
            column("new_id", UUID(as_uuid=True)),
            column("event_id", UUID(as_uuid=True)),
            column("upsert", Boolean),
            column("external_id", Text),
            column("given_fields", ARRAY(Text)),
            column("has_expected", Boolean),
            column("expected", ARRAY(Integer)),
            column("has_unless", Boolean),
            column("unless", ARRAY(Integer)),
            *(column(name, table.c[name].type) for name in judging.fields),
        )
        .render_derived(name="given", with_types=True)
    )


def found_column(name: str) -> str:
    """The name ``judged`` gives the column ``name`` of the record a write names."""
    return f"found_{name}"


@overload
def judged(
    judging: Judging, shown_before: JsonSql | None = None, *, routed: Literal[False] = False
) -> CTE: ...


@overload
def judged(
    judging: Judging, shown_before: JsonSql | None = None, *, routed: Literal[True]
) -> Subquery: ...


def judged(
    judging: Judging, shown_before: JsonSql | None = None, *, routed: bool = False
) -> CTE | Subquery:
    """The CTE ``judged`` of a statement over the writes (its ``parameters``): each write's
    columns (``ordinal``, ``new_id``, ``event_id``, its fields), the fields it changes
    (``changed_fields``: given, and different), its ``verdict``, for each reference whether the
    id it writes names a row of the department or none (``known_<field>``), and the record it
    names, locked (its columns and ``read_columns``, each as ``found_column`` names it; null
    when none), with its JSON as it was when it changes (``shown_before``, made by the given
    function of a row).

    What comes after reads the record a write names from it, never by joining two CTEs:
    PostgreSQL cannot tell how many rows a CTE holds, and plans a nested loop over two of a
    thousand rows each.

    ``routed``: the same as a subquery of subqueries, for a statement that only reads it (on a
    distributed schema): Citus routes a SELECT of subqueries over the writes' function and the
    schema's tables whole to the tenant's worker, where it plans a CTE that locks rows as a
    subplan of its own."""
    department_id = bindparam(DEPARTMENT, type_=judging.table.c.department_id.type)
    given = _given(judging)
    found = _named(_locking(judging, department_id), "found", routed)
    compared = _named(_compared(judging, given, found, shown_before), "compared", routed)
    known = _known(judging, compared, department_id)
    return _named(select(compared, _verdict(compared).label("verdict"), *known), "judged", routed)


def _locking(judging: Judging, department_id: ColumnElement[Any]) -> Select[Any]:
    """The records the writes name, by their external ids (or their key's values), locked in
    id order."""
    table = judging.table
    key = table.c[judging.key]
    kind = Text() if judging.key == "external_id" else key.type
    return (
        select(*table.c, *judging.read_columns)
        .where(
            table.c.department_id == department_id,
            # An array of its own, not the writes' relation: Citus fails to read back what a
            # locking read joined to a function computed ("invalid input syntax ... PGCOPY").
            key == any_(bindparam("external_ids", type_=ARRAY(kind))),
        )
        .order_by(table.c.id)
        .with_for_update(of=table)
    )


def _changed_fields(
    judging: Judging, given: NamedFromClause, found: NamedFromClause
) -> ColumnElement[Any]:
    """The fields a write gives whose values differ from the record's it names."""
    differing = [
        case(
            (
                and_(
                    literal_column(f"'{name}'") == any_(given.c.given_fields),
                    given.c[name].is_distinct_from(found.c[name]),
                ),
                literal_column(f"'{name}'"),
            )
        )
        for name in judging.fields
    ]
    return cast(func.array_remove(array(differing), null()), ARRAY(Text))


def _compared(
    judging: Judging,
    given: NamedFromClause,
    found: NamedFromClause,
    shown_before: JsonSql | None,
) -> Select[Any]:
    """Each write with the fields it changes and the record it names (as ``found_column``
    names its columns), and that record's JSON when it changes (``shown_before``)."""
    changed_fields = _changed_fields(judging, given, found)
    before = (
        []
        if shown_before is None
        else [
            case((func.cardinality(changed_fields) > 0, shown_before(found))).label("shown_before")
        ]
    )
    read = [*judging.table.c, *judging.read_columns]
    return select(
        given,
        changed_fields.label("changed_fields"),
        *(found.c[column.name].label(found_column(column.name)) for column in read),
        *before,
    ).select_from(given.outerjoin(found, found.c[judging.key] == given.c[judging.key]))


def _verdict(compared: NamedFromClause) -> ColumnElement[str]:
    """What the rules make of a compared write (``INSERT``, ``CHANGE``, ...)."""
    versions = compared.c[found_column("version")]
    return case(
        (
            compared.c[found_column("id")].is_(None),
            case((compared.c.has_expected, MISSING), else_=INSERT),
        ),
        (~compared.c.upsert, TAKEN),
        (
            compared.c.has_unless
            & or_(compared.c.unless.is_(None), versions == any_(compared.c.unless)),
            UNLESS,
        ),
        (
            compared.c.has_expected
            & ~or_(compared.c.expected.is_(None), versions == any_(compared.c.expected)),
            NOT_EXPECTED,
        ),
        (func.cardinality(compared.c.changed_fields) == 0, UNCHANGED),
        else_=CHANGE,
    )


def _known(
    judging: Judging, compared: NamedFromClause, department_id: ColumnElement[Any]
) -> list[ColumnElement[bool]]:
    """For each reference, whether the id a compared write gives names a row of the
    department, or none (``known_<field>``)."""
    found_id = compared.c[found_column("id")]
    return [
        or_(
            compared.c[name].is_(None),
            # A change checks only the references it changes.
            found_id.isnot(None)
            & ~(literal_column(f"'{name}'") == any_(compared.c.changed_fields)),
            exists().where(ref.c.id == compared.c[name], ref.c.department_id == department_id),
        ).label(f"known_{name}")
        for name, ref in judging.references.items()
    ]


def _named(query: Select[Any], name: str, routed: bool) -> CTE | Subquery:
    return query.subquery(name) if routed else query.cte(name)


# By the record's table (a tenant's with its custom fields' columns is a record of its own, of
# columns of its own) and key.
_JUDGED: Kept[tuple[Table, str, bool], Select[Any]] = Kept()


def judged_statement(judging: Judging, *, routed: bool = False) -> Select[Any]:
    """Each write's ``ordinal``, ``verdict``, ``changed_fields`` and ``known_<field>`` checks,
    with the record it names (its columns and ``read_columns``, by their own names; all null
    when none), in the order of the writes: ``judged`` alone, for a record written one write at
    a time (``routed``: of subqueries, on a distributed schema). Built once per table."""
    return _JUDGED.get(
        (*judging.built_as, routed), lambda: built_once(_judged_statement(judging, routed))
    )


def _judged_statement(judging: Judging, routed: bool) -> Select[Any]:
    verdicts = judged(judging, routed=True) if routed else judged(judging)
    read = [*judging.table.c, *judging.read_columns]
    return select(
        verdicts.c.ordinal,
        verdicts.c.verdict,
        verdicts.c.changed_fields,
        *(verdicts.c[f"known_{name}"] for name in judging.references),
        *(verdicts.c[found_column(column.name)].label(column.name) for column in read),
    ).order_by(verdicts.c.ordinal)


def references_known(judging: Judging, judged: NamedFromClause) -> ColumnElement[bool]:
    """Whether every id a judged write gives a reference names a row of the department."""
    checks = [judged.c[f"known_{name}"] for name in judging.references]
    return and_(*checks) if checks else literal_column("true", Boolean)


def error_of(
    noun: str, write: Write[Fields], verdict: str, row: Mapping[str, Any], judging: Judging
) -> DomainError | None:
    """The error a judged write fails with (``row``: its ``judged`` columns), or None."""
    if verdict == TAKEN:
        return taken(noun, write)
    if verdict == MISSING:
        return precondition_failed(noun, write, "does not exist, and If-Match needs it to")
    if verdict == UNLESS:
        return precondition_failed(noun, write, "exists at a version If-None-Match names")
    if verdict == NOT_EXPECTED:
        return precondition_failed(noun, write, "is not at a version If-Match names; read it again")
    unknown = [name for name in judging.references if not row[f"known_{name}"]]
    if unknown:
        return Invalid.unknown_references(unknown, f"the {noun}'s department")
    return None


def taken(noun: str, write: Write[Fields]) -> DomainError:
    """A create's external id that another record of the department has."""
    return ExternalIdTaken(
        f"Another {noun} of the department has the external id {write.external_id!r}."
    )


def raced_away(noun: str, write: Write[Fields]) -> DomainError:
    """An external id inserted and deleted again by others between an upsert's insert, which
    found it taken, and its second read: rare, and a retry of the operation settles it."""
    return ExternalIdTaken(
        f"Another {noun} of the department took the external id {write.external_id!r} at"
        " the same time; retry."
    )


def precondition_failed(noun: str, write: Write[Fields], why: str) -> DomainError:
    return PreconditionFailed(f"The {noun} with the external id {write.external_id!r} {why}.")


def changed_values(write: Write[Fields], changed_fields: Sequence[str]) -> dict[str, object]:
    """The values of the fields ``judged`` found changed, from the write's model (custom ones
    by their columns, as a fitted model dumps them)."""
    fields: BaseModel = write.fields
    values = fields.model_dump()
    return {name: values[name] for name in changed_fields}
