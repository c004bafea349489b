"""Running a batch: each operation's data judged alone, then applied by the resource's service
(``record_writes.apply_writes``).

A batch is per operation by default: an operation that fails leaves the others written, and its
result says why. ``atomic`` makes it all or nothing: any failure rolls every operation back and
answers ``BatchRejected`` with the failures found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pydantic import BaseModel
from sqlalchemy import text

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.errors import BatchRejected, DomainError, Invalid
from dealbase.platform.batches.models import (
    Batch,
    Fields,
    Operation,
    Record,
    Result,
    Write,
    given_fields,
)
from dealbase.platform.events import service as events
from dealbase.platform.validation import validated

# Applies writes (all valid) and answers a result for each, by index: every write's, or, when
# one fails and the batch is atomic, those up to that one (``record_writes.apply_writes``); now, or
# once the statement that writes them has gone (with the COMMIT).
Apply = Callable[
    [UnitOfWork, Sequence[Write[Fields]]],
    dict[int, Result[Record]] | AfterCommit[dict[int, Result[Record]]],
]


def writes_of(
    batch: Batch, create: type[Fields], upsert: type[Fields], key: str = "external_id"
) -> tuple[list[Write[Fields]], dict[int, Result[Record]]]:
    """The operations whose data passes its model (``create``'s or ``upsert``'s), and a failed
    result for each of the others (an external id, or a value of the upserts' ``key`` column,
    named twice in a batch fails its later operations: which would win?)."""
    writes: list[Write[Fields]] = []
    failed: dict[int, Result[Record]] = {}
    seen: set[object] = set()
    for index, operation in enumerate(batch.operations):
        path = f"operations[{index}]"
        try:
            fields = validated(create if operation.op == "create" else upsert, operation.data)
        except Invalid as exc:
            failed[index] = Result.failed(exc.within(f"{path}.data"))
            continue
        try:
            external_id = _external_id(operation, fields, path)
            named = _named_by(operation, fields, path, key, external_id)
        except Invalid as exc:
            failed[index] = Result.failed(exc)
            continue
        if operation.op == "upsert" and key == "external_id":
            fields = fields.model_copy(update={"external_id": external_id})
        if named is not None:
            if named in seen:
                failed[index] = Result.failed(
                    Invalid.of(
                        _named_at(operation, path, key),
                        "duplicate_item",
                        "An earlier operation of the batch names this external id."
                        if operation.op == "create" or key == "external_id"
                        else "An earlier operation of the batch names this value of the key.",
                    )
                )
                continue
            seen.add(named)
        writes.append(
            Write(index, operation.op == "upsert", external_id, fields, given_fields(fields))
        )
    return writes, failed


def _external_id(operation: Operation, fields: BaseModel, path: str) -> str | None:
    """The write's external id: its data's, or (an upsert by external id) the operation's,
    which its data may repeat but not contradict."""
    given: str | None = getattr(fields, "external_id", None)
    if operation.op != "upsert" or operation.external_id is None:
        return given
    if given is not None and given != operation.external_id:
        raise Invalid.of(
            f"{path}.data.external_id",
            "mismatch",
            "data.external_id must be the operation's external_id, or absent.",
        )
    return operation.external_id


def _named_by(
    operation: Operation, fields: BaseModel, path: str, key: str, external_id: str | None
) -> object:
    """What names the write's record in the batch: its external id, or an upsert's value of
    the ``key`` column (which its data must give)."""
    if operation.op == "create" or key == "external_id":
        return external_id
    value = fields.model_dump().get(key)
    if value is None:
        raise Invalid.of(
            f"{path}.data.{operation.upsert_key}",
            "missing",
            "An upsert by this key gives the key's value in its data.",
        )
    return value


def _named_at(operation: Operation, path: str, key: str) -> str:
    if operation.op == "create":
        return f"{path}.data.external_id"
    return f"{path}.external_id" if key == "external_id" else f"{path}.upsert_key"


def run(
    uow: UnitOfWork,
    batch: Batch,
    apply: Apply[Fields, Record],
    *,
    create: type[Fields],
    upsert: type[Fields],
    atomic: bool,
    key: str = "external_id",
) -> AfterCommit[list[Result[Record]]]:
    """Every operation's result, in the batch's order, once read: ``create`` and ``upsert``
    are the models their operations' data must pass (the same for most resources). An atomic
    batch with a failure is rejected (``BatchRejected``): now when its writes were applied now
    (the unit of work rolls them back), else when read (its statement wrote nothing)."""
    results: dict[int, Result[Record]]
    writes, results = writes_of(batch, create, upsert, key)
    if atomic and results:
        raise _rejected(results)
    applied = apply(uow, writes)

    def answered(applied: dict[int, Result[Record]]) -> list[Result[Record]]:
        for index, result in applied.items():
            results[index] = (
                result if result.error is None else Result.failed(_within(index, result.error))
            )
        if atomic and any(result.error is not None for result in results.values()):
            raise _rejected(results)
        return [results[index] for index in range(len(batch.operations))]

    if isinstance(applied, AfterCommit):
        return AfterCommit(lambda: answered(applied.read()))
    done = answered(applied)
    return AfterCommit(lambda: done)


def _rejected(results: dict[int, Result[Record]]) -> BatchRejected:
    failures = sorted(
        (index, result.error) for index, result in results.items() if result.error is not None
    )
    return BatchRejected(
        f"{len(failures)} of the batch's operations failed, so none was applied.", failures
    )


def _within(index: int, error: DomainError) -> DomainError:
    """A field error of an operation (a step of another department...) names its field within
    the operation's data, as the errors of its data's model do."""
    return error.within(f"operations[{index}].data") if isinstance(error, Invalid) else error


@contextmanager
def savepoint(uow: UnitOfWork) -> Iterator[None]:
    """The writes inside, the events they recorded and the statements they deferred, undone
    together on a DomainError (which is raised again); kept otherwise."""
    marker = events.pending_count(uow)
    deferred = uow.connection.deferred_count
    uow.connection.execute(text("SAVEPOINT batch_operation"))
    try:
        yield
    except DomainError:
        # Forgotten first: what has not gone yet would otherwise go with the rollback.
        uow.connection.discard_deferred_after(deferred)
        uow.connection.execute(text("ROLLBACK TO SAVEPOINT batch_operation"))
        events.discard_pending_after(uow, marker)
        raise
    uow.connection.execute(text("RELEASE SAVEPOINT batch_operation"))
