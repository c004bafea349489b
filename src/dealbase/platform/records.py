"""A synced record described once (``SyncedRecord``), and the writes every synced record makes the
same way, written once over that description: the change of PATCH and of an upsert that finds its
record (``update``), the delete (``delete``), many by id (``by_ids``), and the creates and upserts
of a batch or of one PUT (``apply_writes``: the one engine of every record's upserts).

Customers, deals and activities live the same life: owned by a department, versioned, an optional
external id, each write recorded as an event. What is particular to one is in its descriptor: its
rows (``rows.OwnedRows``, its table), its read model made from a row, its JSON, the fields that
name other rows of its department and how they are checked, the events a change of one field is
besides ``<noun>.updated``, its side effects around a delete, and how its creates and upserts
reach its table (``OneByOne`` or ``InBulk``). Its own writes (a deal's moves and links, each
record's create with its event in one statement) stay in its service.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Select, Table, bindparam, select

from dealbase.db.faults import Fault
from dealbase.db.statements import Record, built_once
from dealbase.db.transactions import Deferred
from dealbase.db.units import AfterCommit, RunAgain, UnitOfWork
from dealbase.errors import DomainError, ExternalIdTaken, Invalid, Unavailable
from dealbase.ids import new_ids
from dealbase.platform import record_changes
from dealbase.platform.batches import bulk_writes, routed_writes, upserts
from dealbase.platform.batches import service as batches
from dealbase.platform.batches.models import Batch, Fields, Outcome, Result, Write
from dealbase.platform.batches.service import savepoint
from dealbase.platform.batches.upserts import Judging
from dealbase.platform.event_types import EventType
from dealbase.platform.events import repository as event_repository
from dealbase.platform.events import service as events
from dealbase.platform.record_changes import ChangedRecord
from dealbase.platform.rows import (
    OwnedRows,
    external_id_taken,
    ids_in_department,
    in_bound_department,
)
from dealbase.platform.shapes import JsonObject, Shape
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected


class Owned(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def department_id(self) -> uuid.UUID: ...

    @property
    def version(self) -> int: ...


Model = TypeVar("Model", bound=Owned)


def _no_side_effects(uow: UnitOfWork, record_id: uuid.UUID) -> None:
    return None


@dataclass(frozen=True)
class OneByOne(Generic[Model, Fields]):
    """A record whose creates are written one at a time, by its own ``insert`` (a deal's
    customers, its first step), and its changes by ``update``."""

    # The new record in the department, its references checked, with its side effects and its
    # ``<noun>.created`` event; None when another has its external id meanwhile.
    insert: Callable[[UnitOfWork, uuid.UUID, Fields], Model | None]
    # Rows of its table (with its ``read_columns``) as read models, in one go (a deal's
    # customers read in one statement for all).
    models: Callable[[UnitOfWork, Sequence[Record]], list[Model]]


@dataclass(frozen=True)
class InBulk:
    """A record whose creates and upserts of a whole batch, and their events, are one statement
    (``batches.bulk_writes``), sent with the COMMIT: its fields' model gives every
    ``field_columns`` value, a row of its table is its read model, and it has no
    ``field_events``."""


IN_BULK = InBulk()


@dataclass(frozen=True)
class SyncedRecord(Generic[Model, Fields]):
    """What is particular to one synced record; the writes below read nothing else of it."""

    rows: OwnedRows  # its table's rows, and its noun ("activity": errors, event types)
    # A row of its table as its read model (a deal's reads its customers).
    to_model: Callable[[UnitOfWork, Record], Model]
    # Its JSON, as its events and REST show it (``resources.<NOUN>``): made of a read model in
    # Python, and of a row by PostgreSQL.
    shape: Shape
    # The model an upsert's data passes: its fields' order is the order a change's events
    # name them in.
    upsert_model: type[BaseModel]
    # How its creates and upserts reach its table (``apply_writes``).
    writes: OneByOne[Model, Fields] | InBulk
    # Each field that names a row of another table, which must be of the record's department.
    references: Mapping[str, Table] = field(default_factory=dict)
    # Events a change of one field is besides ``<noun>.updated`` (with that field alone).
    field_events: tuple[tuple[str, EventType], ...] = ()
    # Before its delete, once its ownership is known: what its delete does to other records.
    before_delete: Callable[[UnitOfWork, uuid.UUID], None] = _no_side_effects
    # Read before its delete when its row alone cannot show it as it was (a deal's customers).
    deleted_as: Callable[[UnitOfWork, uuid.UUID], Model] | None = None
    # Columns besides its table's that ``to_model`` reads from a row (a deal's employee's name).
    read_columns: tuple[ColumnElement[Any], ...] = ()
    noun: str = field(init=False)
    # What its change statement (``record_changes``) is made of.
    changes: ChangedRecord = field(init=False)
    # What its creates and upserts are judged against (``batches.upserts``).
    judging: Judging = field(init=False)
    # Its version and JSON text by id (``get_as_json``), for a caller with a department or not.
    one_as_json: Mapping[bool, Select[Any]] = field(init=False)

    def __post_init__(self) -> None:
        table = self.rows.table
        object.__setattr__(self, "noun", self.rows.noun)
        changes = ChangedRecord(
            table, self.noun, self.shape.text_of_row, self.references, self.field_events
        )
        object.__setattr__(self, "changes", changes)
        fields = tuple(
            name
            for name in self.upsert_model.model_fields
            if name in table.c and name != "external_id"
        )
        judging = Judging(table, fields, self.references, self.read_columns)
        object.__setattr__(self, "judging", judging)
        object.__setattr__(
            self,
            "one_as_json",
            {
                one_department: built_once(
                    select(table.c.version, self.shape.text_of_row(table)).where(
                        table.c.id == bindparam("record_id", type_=table.c.id.type),
                        in_bound_department(table, one_department),
                    )
                )
                for one_department in (False, True)
            },
        )
        if isinstance(self.writes, InBulk) and self.field_events:
            raise ValueError("a record written in bulk records no field events")

    def as_json(self, model: Model) -> JsonObject:
        return self.shape.as_json(model)

    def event(self, happened: str) -> EventType:
        return cast(EventType, f"{self.noun}.{happened}")

    def check_references(
        self, uow: UnitOfWork, department_id: uuid.UUID, values: Mapping[str, object]
    ) -> None:
        """Every id ``values`` give a reference must name a row of the record's department
        (``department_id``): else Invalid, each such field ``not_found``; one statement a
        reference given."""
        unknown = [
            name
            for name, table in self.references.items()
            if isinstance(value := values.get(name), uuid.UUID)
            and not ids_in_department(uow.connection, table, department_id, [value])
        ]
        if unknown:
            raise Invalid.unknown_references(unknown, f"the {self.noun}'s department")


def get_as_json(
    record: SyncedRecord[Any, Any], uow: UnitOfWork, record_id: uuid.UUID
) -> tuple[int, str]:
    """The record, if the caller may see it (else NotFound), as its version and its JSON text
    made by PostgreSQL (REST's read of one)."""
    scope = uow.scope
    values: dict[str, object] = {"record_id": record_id, "tenant_id": str(scope.tenant_id)}
    if scope.department_id is not None:
        values["department_id"] = scope.department_id
    statement = record.one_as_json[scope.department_id is not None]
    row = uow.connection.execute(statement, values).first()
    if row is None:
        raise record.rows.not_found(record_id)
    return row[0], row[1]


def update(
    record: SyncedRecord[Model, Any],
    uow: UnitOfWork,
    record_id: uuid.UUID,
    changes: dict[str, object],
    expected: Expected | None = None,
) -> Model:
    """``update_later``'s record, its statement sent now."""
    return record.to_model(uow, update_later(record, uow, record_id, changes, expected).read())


def update_as_json(
    record: SyncedRecord[Model, Any],
    uow: UnitOfWork,
    record_id: uuid.UUID,
    changes: dict[str, object],
    expected: Expected | None = None,
) -> AfterCommit[tuple[int, str]]:
    """``update_later``'s record as its version and its JSON text made by PostgreSQL (REST's
    answer)."""
    written = update_later(record, uow, record_id, changes, expected)

    def shown() -> tuple[int, str]:
        row = written.read()
        return row["version"], row["shown"]

    return AfterCommit(shown)


def update_later(
    record: SyncedRecord[Model, Any],
    uow: UnitOfWork,
    record_id: uuid.UUID,
    changes: dict[str, object],
    expected: Expected | None = None,
) -> AfterCommit[Record]:
    """``changes`` (values of the record's fields, ``None`` clearing one) as a new version of
    the record, if the caller owns it (else NotFound), the ids its references name are of the
    record's department (else Invalid, each such field ``not_found``) and it is at a version
    ``expected`` admits (else PreconditionFailed); its events: ``<noun>.updated`` with the
    fields whose value changed and their values before, and each of ``field_events`` whose
    field changed. Every accepted change, even an empty one, is a new version; one that changes
    no value is no event.

    One statement (``record_changes``) sent with the unit of work's next round trip: with the
    COMMIT, when nothing else runs. Its row is read once it has gone: the record's columns, its
    JSON text (``shown``), the fields that changed.

    On a distributed schema, two statements Citus routes whole (``record_changes.Routed``),
    sent now: the events they make are inserted with the next round trip (with the COMMIT, when
    nothing else runs), which their answer must have reached first; a second round trip."""
    scope = uow.scope
    versions = None if expected is None else expected.versions
    shape = record_changes.Shape(
        tuple(changes), scope.department_id is not None, versions is not None
    )
    event_names = record_changes.event_ids(record.changes, shape)
    values = record_changes.parameters(
        shape,
        record_id,
        scope.department_id,
        changes,
        versions,
        event_names,
        new_ids(len(event_names)),
        scope.tenant_id,
    )
    connection, meaning = uow.connection, record.rows.external_id_meaning
    if connection.distributed:
        routed = record_changes.routed(record.changes, shape)
        written = connection.defer(routed.update, values, meaning=meaning)
        check = connection.defer(routed.check, values)
        row = record_changes.routed_row(
            written.rows().mappings().first(), check.rows().mappings().first()
        )
        if row is not None:
            event_repository.record_texts_later(connection, row["events"])
        events.recorded_by_statement(uow, lambda: _wakes(row))
        return AfterCommit(lambda: _written(record, row, record_id))
    deferred = connection.defer(
        record_changes.statement(record.changes, shape), values, meaning=meaning
    )
    events.recorded_by_statement(uow, lambda: _wakes(deferred.rows().mappings().first()))
    return AfterCommit(lambda: _written(record, deferred.rows().mappings().first(), record_id))


def _written(record: SyncedRecord[Model, Any], row: Record | None, record_id: uuid.UUID) -> Record:
    """The row ``update_later``'s statement wrote, or why it wrote none."""
    if row is None:
        raise record.rows.not_found(record_id)
    if row["id"] is None:
        unknown = [name for name in record.references if row.get(f"known_{name}") is False]
        if unknown:
            raise Invalid.unknown_references(unknown, f"the {record.noun}'s department")
        raise record.rows.changed_since_expected()
    return row


def _wakes(row: Record | None) -> bool:
    return row is not None and bool(row["changed_fields"]) and bool(row["wakes"])


def delete(
    record: SyncedRecord[Model, Any],
    uow: UnitOfWork,
    record_id: uuid.UUID,
    expected: Expected | None = None,
) -> None:
    """Deletes the record, if the caller owns it and it is at a version ``expected`` admits,
    with its ``before_delete`` side effects; its event ``<noun>.deleted`` shows it as it was."""
    connection, department_id = uow.connection, uow.scope.department_id
    # Owned, or NotFound, before any side effect.
    shown = None if record.deleted_as is None else record.deleted_as(uow, record_id)
    has_side_effects = record.before_delete is not _no_side_effects
    if (
        shown is None
        and has_side_effects
        and not record.rows.by_ids(connection, department_id, [record_id])
    ):
        raise record.rows.not_found(record_id)
    record.before_delete(uow, record_id)
    row = record.rows.delete(connection, department_id, record_id, expected)
    if shown is None:
        shown = record.to_model(uow, row)
    events.record(uow, record.event("deleted"), shown.department_id, record.as_json(shown))


def by_ids(
    record: SyncedRecord[Model, Any], uow: UnitOfWork, record_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Model]:
    """Many records the caller may see, by id, in one statement; unknown ids are left out.
    A record whose ``to_model`` reads again (a deal) reads once more per record: deals batch
    that read in their own ``by_ids``."""
    rows = record.rows.by_ids(uow.connection, uow.scope.department_id, record_ids)
    return {row_id: record.to_model(uow, row) for row_id, row in rows.items()}


def upsert(
    record: SyncedRecord[Model, Fields], uow: UnitOfWork, write: Write[Fields]
) -> AfterCommit[Result[Model]]:
    """A single upsert (PUT by external id, a GraphQL upsert): its result once read, or its
    error raised (a record written one at a time raises it now, and the unit of work rolls
    back)."""
    applied = apply_writes(record, uow, [write], isolated=False)

    def result(results: Mapping[int, Result[Model]]) -> Result[Model]:
        found = results[write.index]
        if found.error is not None:
            raise found.error
        return found

    if isinstance(applied, AfterCommit):
        return AfterCommit(lambda: result(applied.read()))
    done = result(applied)
    return AfterCommit(lambda: done)


def batch(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    operations: Batch,
    *,
    create: type[Fields],
    upsert: type[Fields] | None = None,
    atomic: bool,
) -> AfterCommit[list[Result[Model]]]:
    """Up to a thousand creates and upserts (``batches.run``): their data judged by ``create``
    and ``upsert`` (``create``'s unless given), then applied by ``apply_writes``, each
    operation alone unless the batch is ``atomic``."""
    return batches.run(
        uow,
        operations,
        lambda uow, writes: apply_writes(record, uow, writes, isolated=not atomic),
        create=create,
        upsert=create if upsert is None else upsert,
        atomic=atomic,
    )


def apply_writes(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    writes: Sequence[Write[Fields]],
    *,
    isolated: bool,
) -> dict[int, Result[Model]] | AfterCommit[dict[int, Result[Model]]]:
    """Applies creates and upserts in the caller's department by the rules of
    ``batches.upserts`` (judged by PostgreSQL, the records they name locked and read by the
    same statement), each write's result by its index: a batch's writes, or a single upsert's
    one.

    ``InBulk``: one statement judges and writes them all, with their events
    (``batches.bulk_writes``), sent with the unit of work's next round trip (with the COMMIT,
    when nothing else runs); the results once it has gone. A failed write is not written; when
    not ``isolated`` (an atomic batch), none is if one fails. On a distributed schema, by the
    same rules, one statement judges them now and a few write them, with the next round trip
    (``batches.routed_writes``): two round trips whatever their number.

    ``OneByOne``: one statement judges them, then each is applied in turn (by the record's
    ``insert``, or ``update``), now. A write that fails is rolled back to its savepoint when
    ``isolated`` (a batch per operation: the others are written); otherwise the first failure
    ends the writes, its result the last one answered (the caller raises it, or rejects the
    batch, and the unit of work rolls back)."""
    if not writes:
        return {}
    if isinstance(record.writes, InBulk):
        return _in_bulk(record, uow, writes, atomic=not isolated)
    department_id = department_of(uow.scope)
    judged = _judged(record, record.writes, uow, department_id, writes)
    results: dict[int, Result[Model]] = {}
    for write in writes:
        try:
            with savepoint(uow) if isolated else nullcontext():
                result = _write_one(
                    record, record.writes, uow, department_id, write, judged[write.index]
                )
        except Unavailable:
            raise
        except DomainError as exc:
            result = Result.failed(exc)
        results[write.index] = result
        if result.error is not None and not isolated:
            break
    return results


# A judged write: its ``judged`` row, and the record it names as its read model, if any.
_Judged = tuple[Record, Model | None]


def _judged(
    record: SyncedRecord[Model, Fields],
    writes: OneByOne[Model, Fields],
    uow: UnitOfWork,
    department_id: uuid.UUID,
    many: Sequence[Write[Fields]],
) -> dict[int, _Judged[Model]]:
    """Each write's verdict (``upserts.judged``), by index, with the record it names, locked."""
    rows = uow.connection.execute(
        upserts.judged_statement(record.judging, routed=uow.connection.distributed),
        upserts.parameters(record.judging, many, department_id, uow.scope.tenant_id).values,
    ).mappings()
    judged = list(rows)
    found = writes.models(uow, [row for row in judged if row["id"] is not None])
    models = {model.id: model for model in found}
    return {row["ordinal"]: (row, models.get(row["id"])) for row in judged}


def _write_one(
    record: SyncedRecord[Model, Fields],
    writes: OneByOne[Model, Fields],
    uow: UnitOfWork,
    department_id: uuid.UUID,
    write: Write[Fields],
    judged: _Judged[Model],
) -> Result[Model]:
    row, current = judged
    error = upserts.error_of(record.noun, write, row["verdict"], row, record.judging)
    if error is not None:
        raise error
    if row["verdict"] == upserts.INSERT:
        created = writes.insert(uow, department_id, write.fields)
        if created is not None:
            return Result("created", created)
        if not write.upsert or write.external_id is None:
            raise upserts.taken(record.noun, write)
        # Another transaction inserted the external id after our read, and has committed.
        row, current = _judged(record, writes, uow, department_id, [write])[write.index]
        if row["verdict"] == upserts.INSERT:
            raise upserts.raced_away(record.noun, write)
        error = upserts.error_of(record.noun, write, row["verdict"], row, record.judging)
        if error is not None:
            raise error
    assert current is not None, "a change has the record it changes"
    if row["verdict"] == upserts.UNCHANGED:
        return Result("unchanged", current)
    changed = upserts.changed_values(write, row["changed_fields"])
    return Result("updated", update(record, uow, current.id, changed))


def _in_bulk(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    writes: Sequence[Write[Fields]],
    *,
    atomic: bool,
) -> AfterCommit[dict[int, Result[Model]]]:
    """On a distributed schema the writes are judged now, and written with the next round
    trip by statements Citus routes whole (``batches.routed_writes``)."""
    department_id = department_of(uow.scope)
    by_index = {write.index: write for write in writes}
    if uow.connection.distributed:
        answered = routed_writes.write(
            uow,
            record.judging,
            record.noun,
            record.shape.text_of_row,
            writes,
            department_id,
            atomic=atomic,
            shown=lambda row: record.as_json(record.to_model(uow, row)),
            meaning=lambda fault: _raced(record.noun, fault),
        )
        return AfterCommit(lambda: _bulk_results(record, uow, answered(), by_index, {}))
    statement = bulk_writes.statement(
        record.judging, record.noun, record.shape.text_of_row, atomic=atomic
    )
    judgement = upserts.parameters(record.judging, writes, department_id, uow.scope.tenant_id)
    written = uow.connection.defer(
        statement, judgement.values, meaning=lambda fault: _raced(record.noun, fault)
    )
    events.recorded_by_statement(uow, lambda: _bulk_wakes(written))
    by_new_id = {record_id: by_index[index] for index, record_id in judgement.new_ids.items()}
    return AfterCommit(
        lambda: _bulk_results(record, uow, written.rows().mappings(), by_index, by_new_id)
    )


def _bulk_results(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    rows: Iterable[Record],
    by_index: Mapping[int, Write[Fields]],
    by_new_id: Mapping[uuid.UUID, Write[Fields]],
) -> dict[int, Result[Model]]:
    """Each write's result from the rows its writes answered (``bulk_writes``): a new record's
    with a null ordinal is told by its id (``by_new_id``)."""
    answered: dict[int, Result[Model]] = {}
    for row in rows:
        ordinal = row["ordinal"]
        write = by_new_id[row["id"]] if ordinal is None else by_index[ordinal]
        verdict = row["verdict"]
        error = upserts.error_of(record.noun, write, verdict, row, record.judging)
        if error is not None:
            answered[write.index] = Result.failed(error)
        elif row["wrote"] or verdict == upserts.UNCHANGED:
            # (Else another write of an atomic batch failed, and none was written.)
            answered[write.index] = Result(_OUTCOMES[verdict], record.to_model(uow, row))
    return answered


_OUTCOMES: dict[str, Outcome] = {
    upserts.INSERT: "created",
    upserts.CHANGE: "updated",
    upserts.UNCHANGED: "unchanged",
}


def _raced(noun: str, fault: Fault) -> RunAgain | None:
    """A bulk insert that met an external id another transaction inserted after the lookup:
    the unit of work runs again, and its lookup finds that record."""
    if external_id_taken(noun, fault) is None:
        return None
    return RunAgain(
        ExternalIdTaken(
            f"Other requests took the batch's external ids of {noun}s at the same time; retry."
        )
    )


def _bulk_wakes(written: Deferred) -> bool:
    rows = written.rows().mappings().all()
    return any(row["wrote"] for row in rows) and bool(rows[0]["wakes"])
