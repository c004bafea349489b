"""The one engine of every synced record's creates and upserts (``apply_writes``): a batch's, or
a single PUT's, written by the rules of ``batches.upserts`` through the record's descriptor
(``records.SyncedRecord``), and how those writes reach its table (``OneByOne`` or ``InBulk``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from dealbase.db.faults import Fault
from dealbase.db.statements import Record
from dealbase.db.transactions import Deferred
from dealbase.db.units import AfterCommit, RunAgain, UnitOfWork
from dealbase.errors import DomainError, ExternalIdTaken, Unavailable, ValueTaken
from dealbase.platform.batches import bulk_writes, routed_writes, upserts
from dealbase.platform.batches.models import Fields, Outcome, Result, Write
from dealbase.platform.batches.service import savepoint
from dealbase.platform.events import service as events
from dealbase.platform.rows import unique_value_taken
from dealbase.platform.validation import department_of

if TYPE_CHECKING:
    from dealbase.platform.records import SyncedRecord


class Owned(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def department_id(self) -> uuid.UUID: ...

    @property
    def version(self) -> int: ...


Model = TypeVar("Model", bound=Owned)


@dataclass(frozen=True)
class OneByOne(Generic[Model, Fields]):
    """A record whose creates are written one at a time, by its own ``insert`` (a deal's
    customers, its first step), and its changes by ``SyncedRecord.change_later``."""

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


def apply_writes(
    record: SyncedRecord[Model, Fields, Any],
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
    ``insert``, or ``change_later``), now. A write that fails is rolled back to its savepoint when
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
    record: SyncedRecord[Model, Fields, Any],
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
    record: SyncedRecord[Model, Fields, Any],
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
    written = record.change_later(uow, current.id, changed).read()
    return Result("updated", record.to_model(uow, written))


def _in_bulk(
    record: SyncedRecord[Model, Fields, Any],
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
    record: SyncedRecord[Model, Fields, Any],
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
    the unit of work runs again, and its lookup finds that record; or a unique custom field's
    value another record has."""
    taken = unique_value_taken(noun, fault)
    if taken is None:
        return None
    if isinstance(taken, ValueTaken):
        # Taken before (answered once the runs are spent), or by a record another request
        # inserted after the lookup by a unique field, which the next run finds.
        return RunAgain(taken)
    return RunAgain(
        ExternalIdTaken(
            f"Other requests took the batch's external ids of {noun}s at the same time; retry."
        )
    )


def _bulk_wakes(written: Deferred) -> bool:
    rows = written.rows().mappings().all()
    return any(row["wrote"] for row in rows) and bool(rows[0]["wakes"])
