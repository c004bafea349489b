"""A synced record described once (``SyncedRecord``), and the writes every synced record makes the
same way, written once over that description: the change of PATCH and of an upsert that finds its
record (``update``), the delete (``delete``), many by id (``by_ids``) and the upsert of one
(``upsert``).

Customers, deals and activities live the same life: owned by a department, versioned, an optional
external id, each write recorded as an event. What is particular to one is in its descriptor: its
rows (``rows.OwnedRows``, its table), its read model made from a row, its JSON, the fields that
name other rows of its department and how they are checked, the events a change of one field is
besides ``<noun>.updated``, and its side effects around a delete. Its own writes (a deal's moves
and links, a customer's bulk upserts, each record's create with its event in one statement) stay
in its service.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, cast

from dealbase.errors import Invalid
from dealbase.platform.batches.models import Fields, Result, Write
from dealbase.platform.batches.upserts import upsert_one
from dealbase.platform.event_types import EventType
from dealbase.platform.events import service as events
from dealbase.platform.resources import JsonObject
from dealbase.platform.rows import OwnedRows
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected
from dealbase.tenancy.database.connections import UnitOfWork
from dealbase.tenancy.database.statements import Record


class Owned(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def department_id(self) -> uuid.UUID: ...

    @property
    def version(self) -> int: ...


Model = TypeVar("Model", bound=Owned)

# Whether the id is of a row of the department (the record's own): a reference's check.
InDepartment = Callable[[UnitOfWork, uuid.UUID, uuid.UUID], bool]


def _no_side_effects(uow: UnitOfWork, record_id: uuid.UUID) -> None:
    return None


@dataclass(frozen=True)
class SyncedRecord(Generic[Model]):
    """What is particular to one synced record; the writes below read nothing else of it."""

    rows: OwnedRows  # its table's rows, and its noun ("activity": errors, event types)
    # A row of its table as its read model (a deal's reads its customers).
    to_model: Callable[[UnitOfWork, Record], Model]
    # As its events (and REST) show it: ``resources.<noun>_json``.
    as_json: Callable[[Model], JsonObject]
    # Each field that names another row of its department, with its check.
    references: Mapping[str, InDepartment] = field(default_factory=dict)
    # Events a change of one field is besides ``<noun>.updated`` (with that field alone).
    field_events: tuple[tuple[str, EventType], ...] = ()
    # Before its delete, once its ownership is known: what its delete does to other records.
    before_delete: Callable[[UnitOfWork, uuid.UUID], None] = _no_side_effects
    # Read before its delete when its row alone cannot show it as it was (a deal's customers).
    deleted_as: Callable[[UnitOfWork, uuid.UUID], Model] | None = None
    noun: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "noun", self.rows.noun)

    def event(self, happened: str) -> EventType:
        return cast(EventType, f"{self.noun}.{happened}")

    def check_references(
        self, uow: UnitOfWork, department_id: uuid.UUID, values: Mapping[str, object]
    ) -> None:
        """Every id ``values`` give a reference must name a row of the record's department
        (``department_id``): else Invalid, each such field ``not_found``."""
        unknown = [
            name
            for name, in_department in self.references.items()
            if isinstance(value := values.get(name), uuid.UUID)
            and not in_department(uow, department_id, value)
        ]
        if unknown:
            raise Invalid.unknown_references(unknown, f"the {self.noun}'s department")


def update(
    record: SyncedRecord[Model],
    uow: UnitOfWork,
    record_id: uuid.UUID,
    changes: dict[str, object],
    expected: Expected | None = None,
) -> Model:
    """``changes`` (values of the record's fields, ``None`` clearing one) as a new version of
    the record, if the caller owns it and it is at a version ``expected`` admits (else NotFound,
    PreconditionFailed); its events: ``<noun>.updated`` with the fields whose value changed
    and their values before, and each of ``field_events`` whose field changed. Every accepted
    change, even an empty one, is a new version; one that changes no value is no event."""
    connection = uow.connection
    department_id = uow.scope.department_id
    if record.references.keys() & changes.keys():
        # Read first: an unknown record is a 404 before the ids it names are judged, and those
        # must be of the record's own department (a tenant-wide caller may reach any).
        found = record.rows.by_ids(connection, department_id, [record_id]).get(record_id)
        if found is None:
            raise record.rows.not_found(record_id)
        department_id = found["department_id"]
        record.check_references(uow, department_id, changes)
    before, after = record.rows.update(connection, department_id, record_id, changes, expected)
    model = record.to_model(uow, after)
    changed, previous = events.changes(before, after, changes)
    if changed:
        data = record.as_json(model)
        events.record(uow, record.event("updated"), model.department_id, data, changed, previous)
        for name, event_type in record.field_events:
            if name in changed:
                events.record(
                    uow, event_type, model.department_id, data, (name,), {name: previous[name]}
                )
    return model


def delete(
    record: SyncedRecord[Model],
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
    record: SyncedRecord[Model], uow: UnitOfWork, record_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Model]:
    """Many records the caller may see, by id, in one statement; unknown ids are left out.
    A record whose ``to_model`` reads again (a deal) reads once more per record: deals batch
    that read in their own ``by_ids``."""
    rows = record.rows.by_ids(uow.connection, uow.scope.department_id, record_ids)
    return {row_id: record.to_model(uow, row) for row_id, row in rows.items()}


def upsert(
    record: SyncedRecord[Model],
    uow: UnitOfWork,
    write: Write[Fields],
    *,
    lock: Callable[[uuid.UUID, str], Model | None],
    insert: Callable[[uuid.UUID, Fields], Model | None],
) -> Result[Model]:
    """An upsert of one record by ``upsert_one``'s rules in the caller's department: ``lock``
    locks and reads the department's record with an external id, ``insert`` creates it (None
    when the external id is taken meanwhile), and a found record changes by ``update``."""
    department_id = department_of(uow.scope)
    return upsert_one(
        write,
        record.noun,
        lock=lambda external_id: lock(department_id, external_id),
        insert=lambda fields: insert(department_id, fields),
        change=lambda current, changes: update(record, uow, current.id, changes),
    )
