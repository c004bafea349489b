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
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from sqlalchemy import Table

from dealbase.errors import DomainError, Invalid, Unavailable
from dealbase.ids import new_id, new_ids
from dealbase.platform import record_changes
from dealbase.platform.batches import service as batches
from dealbase.platform.batches import upserts
from dealbase.platform.batches.models import Batch, Fields, Result, Write
from dealbase.platform.batches.service import changed_fields, savepoint
from dealbase.platform.batches.upserts import Judged
from dealbase.platform.event_types import EventType
from dealbase.platform.events import service as events
from dealbase.platform.record_changes import ChangedRecord, JsonSql
from dealbase.platform.resources import JsonObject, json_value
from dealbase.platform.rows import OwnedRows, ids_in_department
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected
from dealbase.tenancy.database.connections import AfterCommit, UnitOfWork
from dealbase.tenancy.database.statements import Deferred, Record


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


@dataclass(frozen=True)
class InBulk:
    """A record whose creates and changes of a whole batch are one statement each (its rows'
    ``insert_many`` and ``update_many``: its fields' model gives every ``field_columns``
    value, its read model has each as an attribute), its references checked before, one
    statement a reference, and its events recorded after, in the order of the writes."""


IN_BULK = InBulk()


@dataclass(frozen=True)
class SyncedRecord(Generic[Model, Fields]):
    """What is particular to one synced record; the writes below read nothing else of it."""

    rows: OwnedRows  # its table's rows, and its noun ("activity": errors, event types)
    # A row of its table as its read model (a deal's reads its customers).
    to_model: Callable[[UnitOfWork, Record], Model]
    # As its events (and REST) show it: ``resources.<noun>_json``.
    as_json: Callable[[Model], JsonObject]
    # The same JSON made by PostgreSQL from a row (``resources.<noun>_json_text_sql``...).
    json_sql: JsonSql
    # The department's records with these external ids, locked until the transaction ends (in
    # id order: two batches lock shared rows in the same order), by external id.
    lock: Callable[[UnitOfWork, uuid.UUID, Sequence[str]], Mapping[str, Model]]
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
    # Columns besides its table's that ``json_sql`` reads from a row (a customer's kept JSON).
    json_columns: tuple[str, ...] = ()
    noun: str = field(init=False)
    # What its change statement (``record_changes``) is made of.
    changes: ChangedRecord = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "noun", self.rows.noun)
        changes = ChangedRecord(
            self.rows.table,
            self.noun,
            self.json_sql,
            self.json_columns,
            self.references,
            self.field_events,
        )
        object.__setattr__(self, "changes", changes)

    def event(self, happened: str) -> EventType:
        return cast(EventType, f"{self.noun}.{happened}")

    def check_references(
        self, uow: UnitOfWork, department_id: uuid.UUID, values: Mapping[str, object]
    ) -> None:
        """Every id ``values`` give a reference must name a row of the record's department
        (``department_id``): else Invalid, each such field ``not_found``."""
        error = self.unknown_references(uow, department_id, [values])[0]
        if error is not None:
            raise error

    def unknown_references(
        self, uow: UnitOfWork, department_id: uuid.UUID, many: Sequence[Mapping[str, object]]
    ) -> list[Invalid | None]:
        """``check_references`` of each of ``many`` values, one statement a reference field
        that any of them gives: each one's error, or None."""
        unknown: list[list[str]] = [[] for _ in many]
        for name, table in self.references.items():
            named = {value for values in many if isinstance(value := values.get(name), uuid.UUID)}
            if not named:
                continue
            known = ids_in_department(uow.connection, table, department_id, named)
            for names, values in zip(unknown, many, strict=True):
                value = values.get(name)
                if isinstance(value, uuid.UUID) and value not in known:
                    names.append(name)
        where = f"the {self.noun}'s department"
        return [Invalid.unknown_references(names, where) if names else None for names in unknown]


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
    JSON text (``shown``), the fields that changed."""
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
    written = uow.connection.defer(
        record_changes.statement(record.changes, shape),
        values,
        meaning=record.rows.external_id_meaning,
    )
    events.recorded_by_statement(uow, lambda: _wakes(written))
    return AfterCommit(lambda: _written(record, written, record_id))


def _written(record: SyncedRecord[Model, Any], written: Deferred, record_id: uuid.UUID) -> Record:
    """The row ``update_later``'s statement wrote, or why it wrote none."""
    row = written.rows().mappings().first()
    if row is None:
        raise record.rows.not_found(record_id)
    if row["id"] is None:
        unknown = [name for name in record.references if row.get(f"known_{name}") is False]
        if unknown:
            raise Invalid.unknown_references(unknown, f"the {record.noun}'s department")
        raise record.rows.changed_since_expected()
    return row


def _wakes(written: Deferred) -> bool:
    row = written.rows().mappings().first()
    return row is not None and bool(row["changed_fields"]) and bool(row["wakes"])


def _record_change(
    record: SyncedRecord[Model, Any],
    uow: UnitOfWork,
    model: Model,
    changed: tuple[str, ...],
    previous: JsonObject,
) -> None:
    """The events of a change of ``changed`` (their values before: ``previous``)."""
    data = record.as_json(model)
    events.record(uow, record.event("updated"), model.department_id, data, changed, previous)
    for name, event_type in record.field_events:
        if name in changed:
            events.record(
                uow, event_type, model.department_id, data, (name,), {name: previous[name]}
            )


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
) -> Result[Model]:
    """A single upsert (PUT by external id, a GraphQL upsert), or its error raised."""
    result = apply_writes(record, uow, [write], isolated=False)[write.index]
    if result.error is not None:
        raise result.error
    return result


def batch(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    operations: Batch,
    *,
    create: type[Fields],
    upsert: type[Fields] | None = None,
    atomic: bool,
) -> list[Result[Model]]:
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
) -> dict[int, Result[Model]]:
    """Applies creates and upserts in the caller's department by the rules of
    ``upserts.judge``, each write's result by its index: a batch's writes, or a single upsert's
    one. The records the writes name are locked and read in one statement; then, as the record
    is written (``record.writes``), all the new ones inserted and all the changed ones written
    in one statement each (``InBulk``, events recorded in the order of the writes), or each
    write applied in turn (``OneByOne``).

    One at a time, a write that fails (a reference of another department...) is rolled back
    to its savepoint when ``isolated`` (a batch per operation: the others are written);
    otherwise the first failure ends the writes, its result the last one answered (the caller
    raises it, or rejects the batch, and the unit of work rolls back).

    Two writers upserting the same new external id at once: the second one's insert waits for
    the first's transaction and then inserts nothing (ON CONFLICT DO NOTHING); it reads the
    record again, locked, and applies its write as a change."""
    department_id = department_of(uow.scope)
    keyed = [write.external_id for write in writes if write.external_id is not None]
    current = record.lock(uow, department_id, keyed)
    if isinstance(record.writes, InBulk):
        return _in_bulk(record, uow, department_id, writes, current)
    results: dict[int, Result[Model]] = {}
    for write in writes:
        found = current.get(write.external_id) if write.external_id is not None else None
        try:
            with savepoint(uow) if isolated else nullcontext():
                result = _write_one(record, record.writes, uow, department_id, write, found)
        except Unavailable:
            raise
        except DomainError as exc:
            result = Result.failed(exc)
        results[write.index] = result
        if result.error is not None and not isolated:
            break
    return results


def _write_one(
    record: SyncedRecord[Model, Fields],
    writes: OneByOne[Model, Fields],
    uow: UnitOfWork,
    department_id: uuid.UUID,
    write: Write[Fields],
    current: Model | None,
) -> Result[Model]:
    verdict = upserts.judge(record.noun, write, current)
    if verdict is Judged.INSERT:
        created = writes.insert(uow, department_id, write.fields)
        if created is not None:
            return Result("created", created)
        if not write.upsert or write.external_id is None:
            raise upserts.taken(record.noun, write)
        # Another transaction inserted the external id after our read, and has committed.
        current = record.lock(uow, department_id, [write.external_id]).get(write.external_id)
        if current is None:
            raise upserts.raced_away(record.noun, write)
        verdict = upserts.judge(record.noun, write, current)
    if isinstance(verdict, DomainError):
        raise verdict
    assert current is not None, "a change has the record it changes"
    changed = changed_fields(write, current)
    if not changed:
        return Result("unchanged", current)
    return Result("updated", update(record, uow, current.id, changed))


def _in_bulk(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    department_id: uuid.UUID,
    writes: Sequence[Write[Fields]],
    current: Mapping[str, Model],
) -> dict[int, Result[Model]]:
    results: dict[int, Result[Model]] = {}
    changes: list[tuple[Write[Fields], Model]] = []

    def inserts(write: Write[Fields], found: Model | None) -> bool:
        """True when ``write`` is to be inserted; else its result or its change is noted."""
        verdict = upserts.judge(record.noun, write, found)
        if isinstance(verdict, DomainError):
            results[write.index] = Result.failed(verdict)
        elif verdict is Judged.CHANGE:
            assert found is not None, "a change has the record it changes"
            changes.append((write, found))
        return verdict is Judged.INSERT

    new = [
        (new_id(), write, write.fields.model_dump())
        for write in writes
        if inserts(write, current.get(write.external_id) if write.external_id else None)
    ]
    if record.references:
        _fail_unknown_references(
            record, uow, department_id, [(write, values) for _, write, values in new], results
        )
        new = [item for item in new if item[1].index not in results]
    # In external id order: two batches inserting the same new ids wait for each other in the
    # same order, never each for the other.
    new.sort(key=lambda item: item[1].external_id or "")
    inserted = {
        row["id"]: record.to_model(uow, row)
        for row in record.rows.insert_many(
            uow.connection,
            department_id,
            [{**values, "id": record_id} for record_id, _, values in new],
        )
    }
    raced: list[Write[Fields]] = []
    for record_id, write, _ in new:
        created = inserted.get(record_id)
        if created is not None:
            results[write.index] = Result("created", created)
        elif write.upsert:
            raced.append(write)
        else:
            results[write.index] = Result.failed(upserts.taken(record.noun, write))
    if raced:
        now_there = record.lock(uow, department_id, [write.external_id or "" for write in raced])
        for write in raced:
            found = now_there.get(write.external_id or "")
            if found is None:
                results[write.index] = Result.failed(upserts.raced_away(record.noun, write))
            else:
                inserts(write, found)

    changing = [(write, before, changed_fields(write, before)) for write, before in changes]
    if record.references:
        _fail_unknown_references(
            record,
            uow,
            department_id,
            [(write, changed) for write, _, changed in changing],
            results,
        )
    changed_by_id: dict[uuid.UUID, tuple[Write[Fields], Model, dict[str, object]]] = {}
    for write, before, changed in changing:
        if write.index in results:
            continue
        if changed:
            changed_by_id[before.id] = (write, before, changed)
        else:
            results[write.index] = Result("unchanged", before)
    field_columns = record.rows.field_columns
    updated = record.rows.update_many(
        uow.connection,
        [
            {
                **{name: getattr(before, name) for name in field_columns},
                **changed,
                "id": before.id,
            }
            for _, before, changed in changed_by_id.values()
        ],
    )
    for row in updated:
        results[changed_by_id[row["id"]][0].index] = Result("updated", record.to_model(uow, row))

    for write in sorted(writes, key=lambda write: write.index):
        result = results[write.index]
        if result.record is None:
            continue
        if result.outcome == "created":
            data = record.as_json(result.record)
            events.record(uow, record.event("created"), department_id, data)
        elif result.outcome == "updated":
            _, before, changed = changed_by_id[result.record.id]
            previous: JsonObject = {name: json_value(getattr(before, name)) for name in changed}
            _record_change(record, uow, result.record, tuple(changed), previous)
    return results


def _fail_unknown_references(
    record: SyncedRecord[Model, Fields],
    uow: UnitOfWork,
    department_id: uuid.UUID,
    given: Sequence[tuple[Write[Fields], Mapping[str, object]]],
    results: dict[int, Result[Model]],
) -> None:
    """Fails, in ``results``, each write whose values (``given``) name a row its department
    does not have."""
    errors = record.unknown_references(uow, department_id, [values for _, values in given])
    for (write, _), error in zip(given, errors, strict=True):
        if error is not None:
            results[write.index] = Result.failed(error)
