"""SQL shared by the features whose rows are department-owned and versioned."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    CTE,
    Column,
    ColumnElement,
    Select,
    Table,
    bindparam,
    delete,
    func,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import Insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql import ClauseElement

from dealbase.db.faults import Fault, faults_meaning
from dealbase.db.statements import Record
from dealbase.db.transactions import TenantConnection
from dealbase.errors import ExternalIdTaken, NotFound, PreconditionFailed, ValueTaken
from dealbase.platform.custom_fields.rules import unique_field_of
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.platform.versioning import Expected

# The prefix of the previous values' columns in what OwnedRows.update's statement returns.
_BEFORE = "before_"

# The columns of a department-owned, versioned row that its server sets, never its client.
_SERVERS_OWN = frozenset(("id", "department_id", "created_at", "updated_at", "version"))


def in_department(table: Table, department_id: uuid.UUID | None) -> ColumnElement[bool]:
    """Rows of the department, or of every department of the tenant when it is None (a
    tenant-wide caller: the schema itself already holds only the tenant's rows)."""
    return true() if department_id is None else table.c.department_id == department_id


def in_bound_department(table: Table, one_department: bool) -> ColumnElement[bool]:
    """``in_department`` for a statement built once: the department is its parameter
    ``department_id`` (given when ``one_department``)."""
    if not one_department:
        return true()
    return table.c.department_id == bindparam("department_id", type_=table.c.department_id.type)


def owned_by(
    table: Table, department_id: uuid.UUID | None, row_id: uuid.UUID
) -> ColumnElement[bool]:
    return (table.c.id == row_id) & in_department(table, department_id)


M = TypeVar("M")


def first_as(
    connection: TenantConnection, statement: ClauseElement, to_model: Callable[[Record], M]
) -> M | None:
    """The first row ``statement`` returns, made a model by ``to_model``; None when none."""
    row = connection.execute(statement).mappings().first()
    return None if row is None else to_model(row)


def _at_expected_version(table: Table, expected: Expected | None) -> ColumnElement[bool]:
    if expected is None or expected.versions is None:
        return true()
    return table.c.version.in_(sorted(expected.versions))


def lookup(query: Select[Any], name: str) -> CTE:
    """``query`` as a materialized CTE, for a value a row to insert looks up (``insert_reading``).

    The form Citus runs on a distributed schema: it refuses a subquery in ``INSERT ... VALUES``,
    and an ``INSERT ... SELECT`` whose values read a subquery (inline, or a CTE that PostgreSQL
    may inline), alone or as a CTE of a larger statement, reaches the worker with a condition
    left empty (``WHERE ( IS NOT NULL)``). A materialized CTE is run first and read as a
    result, which Citus plans."""
    return query.cte(name).prefix_with("MATERIALIZED")


def insert_reading(table: Table, values: Mapping[str, object], *lookups: CTE) -> Insert:
    """``INSERT ... SELECT`` of one row of ``values`` (SQL expressions, or Python values sent as
    parameters), which read other rows only through ``lookups`` (made by ``lookup``)."""
    selected = [
        value
        if isinstance(value, ColumnElement)
        else bindparam(None, value, type_=table.c[name].type)
        for name, value in values.items()
    ]
    statement = pg_insert(table).from_select(list(values), select(*selected))
    for found in lookups:
        statement = statement.add_cte(found)
    return statement


def ids_in_department(
    connection: TenantConnection, table: Table, department_id: uuid.UUID, ids: Collection[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of ``ids`` name rows of ``table`` in the department (a reference's check), in one
    statement."""
    found = connection.execute(
        select(table.c.id).where(table.c.id.in_(list(ids)), table.c.department_id == department_id)
    )
    return {row_id for (row_id,) in found}


def unique_value_taken(noun: str, fault: Fault) -> ExternalIdTaken | ValueTaken | None:
    """What a write's database fault means when it gave a row an external id its department
    already uses, or a unique custom field's value another row of it has: 409
    ExternalIdTaken or ValueTaken, not a database error; else None."""
    if fault.kind != "unique":
        return None
    constraint = fault.constraint or ""
    if constraint.endswith("_external_id_key"):
        return ExternalIdTaken(f"Another {noun} of the department has this external_id.")
    field = unique_field_of(noun, constraint)
    if field is None:
        return None
    return ValueTaken(
        f"Another {noun} of the department has this value of {CUSTOM_FIELDS}.{field},"
        " a unique field."
    )


@contextmanager
def unique_values_taken(noun: str) -> Iterator[None]:
    """``unique_value_taken`` of a statement run inside. The transaction is then unusable, as
    after any failed statement; the unit of work rolls it back (or a batch, to its savepoint)."""
    with faults_meaning(lambda fault: unique_value_taken(noun, fault)):
        yield


@dataclass(frozen=True)
class OwnedRows:
    """The rows of one department-owned, versioned table (customers, deals, activities, webhook
    endpoints...), read and written as every such record is: the generic part of a record's
    repository, which holds one (``repository.rows``); its callers are the repository's own
    verbs and, for a synced record, its descriptor (``records.SyncedRecord``, which makes its
    own of its shape's table and its noun), never a service.
    A row another department owns answers exactly as one that does not exist."""

    table: Table
    noun: str  # "customer": what errors call the row

    @functools.cached_property
    def field_columns(self) -> tuple[str, ...]:
        """What a client sets: every column but the server's own."""
        return tuple(c.name for c in self.table.c if c.name not in _SERVERS_OWN)

    def update(
        self,
        connection: TenantConnection,
        department_id: uuid.UUID | None,
        row_id: uuid.UUID,
        changes: Mapping[str, object],
        expected: Expected | None = None,
    ) -> tuple[Record, Record]:
        """Applies ``changes`` as a new version of the row (``updated_at`` now), only if the
        row is the caller's and at a version ``expected`` admits; else NotFound or
        PreconditionFailed.

        Returns the row before and after, from the one statement: the row is locked and read
        by a subquery of the UPDATE (what its events tell as ``previous``)."""
        table = self.table
        before = (
            select(*table.c).where(owned_by(table, department_id, row_id)).with_for_update()
        ).subquery("before")
        with unique_values_taken(self.noun):
            found = (
                connection.execute(
                    update(table)
                    .where(table.c.id == before.c.id, _at_expected_version(table, expected))
                    .values(**changes, updated_at=func.now(), version=table.c.version + 1)
                    .returning(
                        *table.c,
                        *(column.label(f"{_BEFORE}{column.name}") for column in before.c),
                    )
                )
                .mappings()
                .first()
            )
        if found is None:
            raise self._missed(connection, department_id, row_id)
        names = [column.name for column in table.c]
        return {name: found[f"{_BEFORE}{name}"] for name in names}, {
            name: found[name] for name in names
        }

    def delete(
        self,
        connection: TenantConnection,
        department_id: uuid.UUID | None,
        row_id: uuid.UUID,
        expected: Expected | None = None,
    ) -> Record:
        """Deletes the row on the same terms as ``update`` changes it; returns it as it was."""
        table = self.table
        deleted = (
            connection.execute(
                delete(table)
                .where(
                    owned_by(table, department_id, row_id), _at_expected_version(table, expected)
                )
                .returning(*table.c)
            )
            .mappings()
            .first()
        )
        if deleted is None:
            raise self._missed(connection, department_id, row_id)
        return deleted

    def _missed(
        self, connection: TenantConnection, department_id: uuid.UUID | None, row_id: uuid.UUID
    ) -> NotFound | PreconditionFailed:
        """Why a guarded UPDATE or DELETE touched no row: the row is not there, or it has moved
        on."""
        exists = connection.execute(
            select(self.table.c.version).where(owned_by(self.table, department_id, row_id))
        ).first()
        if exists is None:
            return self.not_found(row_id)
        return self.changed_since_expected()

    def changed_since_expected(self) -> PreconditionFailed:
        """What a change or delete of a row no longer at a version If-Match names answers."""
        return PreconditionFailed(
            f"The {self.noun} has changed since the version named in If-Match; read it again."
        )

    def unique_value_meaning(self, fault: Fault) -> ExternalIdTaken | ValueTaken | None:
        """``unique_value_taken`` of this noun: a deferred write's ``meaning``."""
        return unique_value_taken(self.noun, fault)

    def not_found(self, row_id: uuid.UUID) -> NotFound:
        """What a row the caller does not own, or that does not exist, answers."""
        return NotFound(f"No {self.noun} has the id {row_id}.")

    def by_ids(
        self,
        connection: TenantConnection,
        department_id: uuid.UUID | None,
        row_ids: Sequence[uuid.UUID],
    ) -> dict[uuid.UUID, Record]:
        """Many rows by id in one statement (what DataLoaders batch); unknown ids are left out."""
        if not row_ids:
            return {}
        table = self.table
        rows = connection.execute(
            select(table).where(table.c.id.in_(row_ids), in_department(table, department_id))
        ).mappings()
        return {row["id"]: row for row in rows}

    def first_per_parent(
        self,
        connection: TenantConnection,
        parent: Column[uuid.UUID],
        parent_ids: Sequence[uuid.UUID],
        department_id: uuid.UUID | None,
        per_parent: int,
    ) -> dict[uuid.UUID, list[Record]]:
        """The first ``per_parent`` rows (oldest first) of each parent, in one statement."""
        found: dict[uuid.UUID, list[Record]] = {parent_id: [] for parent_id in parent_ids}
        if not parent_ids:
            return found
        table = self.table
        ranked = (
            select(
                table,
                parent.label("parent_id"),
                func.row_number().over(partition_by=parent, order_by=table.c.id).label("rank"),
            )
            .where(parent.in_(parent_ids), in_department(table, department_id))
            .subquery()
        )
        rows = connection.execute(
            select(ranked)
            .where(ranked.c.rank <= per_parent)
            .order_by(ranked.c.parent_id, ranked.c.id)
        ).mappings()
        for row in rows:
            found[row["parent_id"]].append(row)
        return found
