"""One upsert by external id, for the resources written one record at a time (deals,
activities; customers are upserted in bulk, ``customers.service.apply_writes``).

The record is locked and read by its external id (``SELECT ... FOR UPDATE``). When there is
none, it is inserted with ``ON CONFLICT (department_id, external_id) DO NOTHING``: a writer that
inserted the same external id first, and has not committed, makes that insert wait, and once it
commits the insert inserts nothing. The record is then locked and read again, now visible, and
the write applied to it as an update. So two transactions upserting the same new external id at
once leave one record, and both succeed: ``created`` and ``updated`` (or ``unchanged``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

from dealbase.errors import DomainError, ExternalIdTaken, PreconditionFailed
from dealbase.platform.batches.models import Fields, Result, Write
from dealbase.platform.batches.service import changed_fields


class Versioned(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def version(self) -> int: ...


Current = TypeVar("Current", bound=Versioned)


def upsert_one(
    write: Write[Fields],
    noun: str,
    *,
    lock: Callable[[str], Current | None],
    insert: Callable[[Fields], Current | None],
    change: Callable[[Current, dict[str, object]], Current],
) -> Result[Current]:
    """Applies an upsert ``write``, raising its error (a DomainError) when it fails.

    ``lock`` locks and reads the record with an external id, or None; ``insert`` creates it from
    the write's fields, or answers None when another record has the external id meanwhile;
    ``change`` writes the changed fields of a record that exists (by the resource's update,
    with its events), given in the order of the fields' model. A write that changes no value
    writes nothing: ``unchanged``.

    ``write.expected`` (If-Match) needs the record to exist at one of those versions;
    ``write.unless`` (If-None-Match) needs it not to exist at one of those (``*``: not to
    exist)."""
    external_id = write.external_id
    assert external_id is not None, "an upsert names its record's external id"
    current = lock(external_id)
    if current is None:
        if write.expected is not None:
            raise precondition_failed(noun, write, "does not exist, and If-Match needs it to")
        created = insert(write.fields)
        if created is not None:
            return Result("created", created)
        # Another transaction inserted the external id after our read, and has committed.
        current = lock(external_id)
        if current is None:
            # Inserted and deleted again by others between our two statements: rare, and a
            # retry of the operation settles it.
            raise ExternalIdTaken(
                f"Another {noun} of the department took the external id {external_id!r} at"
                " the same time; retry."
            )
    if write.unless is not None and write.unless.admits(current.version):
        raise precondition_failed(noun, write, "exists at a version If-None-Match names")
    if write.expected is not None and not write.expected.admits(current.version):
        raise precondition_failed(noun, write, "is not at a version If-Match names; read it again")
    changed = changed_fields(write, current)
    if not changed:
        return Result("unchanged", current)
    # In the model's order, as a PATCH names them (its events list them so).
    in_order = {name: changed[name] for name in type(write.fields).model_fields if name in changed}
    return Result("updated", change(current, in_order))


def precondition_failed(noun: str, write: Write[Fields], why: str) -> DomainError:
    return PreconditionFailed(f"The {noun} with the external id {write.external_id!r} {why}.")
