"""The rules of a create or an upsert by external id (``judge``), for every synced record, and
the errors they answer; ``records.apply_writes`` applies them.

The record is locked and read by its external id (``SELECT ... FOR UPDATE``). When there is
none, it is inserted with ``ON CONFLICT (department_id, external_id) DO NOTHING``: a writer that
inserted the same external id first, and has not committed, makes that insert wait, and once it
commits the insert inserts nothing. The record is then locked and read again, now visible, and
the write applied to it as an update. So two transactions upserting the same new external id at
once leave one record, and both succeed: ``created`` and ``updated`` (or ``unchanged``).
"""

from __future__ import annotations

import uuid
from enum import Enum
from typing import Protocol

from dealbase.errors import DomainError, ExternalIdTaken, PreconditionFailed
from dealbase.platform.batches.models import Fields, Write


class Versioned(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def version(self) -> int: ...


class Judged(Enum):
    INSERT = "insert"
    CHANGE = "change"


def judge(noun: str, write: Write[Fields], current: Versioned | None) -> Judged | DomainError:
    """What the rules of a create or an upsert make of ``write``, given the record of the
    department that has its external id (``current``), or none: insert it, change ``current``,
    or the error the write fails with. The one place these rules are written, for the bulk
    writes and for the ones written one at a time (``records.apply_writes``).

    A create fails when the external id is taken; an upsert changes the record that has it.
    ``write.expected`` (If-Match) needs the record to exist at one of those versions;
    ``write.unless`` (If-None-Match) needs it not to exist at one of those (``*``: not to
    exist)."""
    if current is None:
        if write.expected is not None:
            return precondition_failed(noun, write, "does not exist, and If-Match needs it to")
        return Judged.INSERT
    if not write.upsert:
        return taken(noun, write)
    if write.unless is not None and write.unless.admits(current.version):
        return precondition_failed(noun, write, "exists at a version If-None-Match names")
    if write.expected is not None and not write.expected.admits(current.version):
        return precondition_failed(noun, write, "is not at a version If-Match names; read it again")
    return Judged.CHANGE


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
