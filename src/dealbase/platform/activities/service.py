from __future__ import annotations

import uuid
from collections.abc import Sequence

from pydantic import BaseModel

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.errors import ExternalIdTaken
from dealbase.platform import records
from dealbase.platform.activities import repository
from dealbase.platform.activities.models import Activity, ActivityFields, ActivityFilter
from dealbase.platform.batches.models import Batch, Result, single_upsert
from dealbase.platform.events import service as events
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.resources import ACTIVITY
from dealbase.platform.tables import activities, customers, deals, employees
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected

RECORD: records.SyncedRecord[Activity, ActivityFields] = records.SyncedRecord(
    rows=repository.rows,
    to_model=lambda uow, row: repository.to_activity(row),
    shape=ACTIVITY,
    upsert_model=ActivityFields,
    writes=records.IN_BULK,
    references={"customer_id": customers, "deal_id": deals, "employee_id": employees},
)


def create(uow: UnitOfWork, fields: ActivityFields) -> Activity:
    """The new activity (activity.created). An external id another activity of the department
    has is ExternalIdTaken."""
    department_id = department_of(uow.scope)
    values = fields.model_dump()
    RECORD.check_references(uow, department_id, values)
    activity = repository.insert_activity(uow.connection, department_id, values)
    if activity is None:
        raise ExternalIdTaken(
            f"Another activity of the department has the external id {fields.external_id!r};"
            " to change that activity, upsert it by its external id."
        )
    events.record(uow, "activity.created", department_id, RECORD.as_json(activity))
    return activity


def get(uow: UnitOfWork, activity_id: uuid.UUID) -> Activity:
    activity = repository.get_activity(uow.connection, uow.scope.department_id, activity_id)
    if activity is None:
        raise repository.rows.not_found(activity_id)
    return activity


def get_as_json(uow: UnitOfWork, activity_id: uuid.UUID) -> tuple[int, str]:
    """``get``'s activity as its version and its JSON text made by PostgreSQL."""
    return records.get_as_json(RECORD, uow, activity_id)


def list_page(
    uow: UnitOfWork, filters: ActivityFilter, limit: int | None, cursor: str | None
) -> Page[Activity]:
    page = page_request(limit, cursor, filters)
    rows = repository.list_activities(uow.connection, uow.scope.department_id, filters, page)
    return page.page_of(rows, lambda activity: activity.id, filters)


def list_page_as_json(
    uow: UnitOfWork, filters: ActivityFilter, limit: int | None, cursor: str | None
) -> Page[str]:
    """``list_page`` with each activity as its JSON text made by PostgreSQL in one statement."""
    page = page_request(limit, cursor, filters)
    rows = repository.list_activities_as_json(
        uow.connection, uow.scope.department_id, filters, page
    )
    found = page.page_of(rows, lambda row: row[0], filters)
    return Page([text for _, text in found.items], found.next_cursor, found.cursors)


def count(uow: UnitOfWork, filters: ActivityFilter) -> int:
    return repository.count_activities(uow.connection, uow.scope.department_id, filters)


def update(
    uow: UnitOfWork, activity_id: uuid.UUID, patch: BaseModel, expected: Expected | None = None
) -> Activity:
    return records.update(RECORD, uow, activity_id, patch.model_dump(exclude_unset=True), expected)


def update_as_json(
    uow: UnitOfWork, activity_id: uuid.UUID, patch: BaseModel, expected: Expected | None = None
) -> AfterCommit[tuple[int, str]]:
    """``update``'s activity as its version and its JSON text made by PostgreSQL, from one
    statement sent with the unit of work's next round trip (REST's answer)."""
    return records.update_as_json(
        RECORD, uow, activity_id, patch.model_dump(exclude_unset=True), expected
    )


def delete(uow: UnitOfWork, activity_id: uuid.UUID, expected: Expected | None = None) -> None:
    records.delete(RECORD, uow, activity_id, expected)


def by_ids(uow: UnitOfWork, activity_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Activity]:
    return records.by_ids(RECORD, uow, activity_ids)


def first_of(
    uow: UnitOfWork, parent: str, parent_ids: Sequence[uuid.UUID], per_parent: int
) -> dict[uuid.UUID, list[Activity]]:
    """The first activities of each deal (``parent="deal_id"``) or customer (``"customer_id"``),
    in one statement for all of them."""
    found = repository.rows.first_per_parent(
        uow.connection,
        activities.c[parent],
        parent_ids,
        uow.scope.department_id,
        per_parent,
    )
    return {key: [repository.to_activity(row) for row in rows] for key, rows in found.items()}


def upsert(
    uow: UnitOfWork,
    external_id: str,
    fields: ActivityFields,
    *,
    expected: Expected | None = None,
    unless: Expected | None = None,
) -> AfterCommit[Result[Activity]]:
    """Creates the activity with ``external_id``, or changes the fields the body gave of the one
    that has it, as ``update`` does (its customer, deal and employee checked alike). A change
    that changes nothing writes nothing (no version, no event): ``unchanged``. ``expected``
    (If-Match) needs the activity to exist at one of its versions; ``unless`` (If-None-Match)
    needs it not to exist at one of its versions (``*``: not to exist)."""
    return records.upsert(RECORD, uow, single_upsert(external_id, fields, expected, unless))


def batch(
    uow: UnitOfWork, operations: Batch, *, atomic: bool
) -> AfterCommit[list[Result[Activity]]]:
    """Creates and upserts up to a thousand activities, one operation after another, each in a
    savepoint of its own unless the batch is atomic (then the first failure rejects it all)."""
    return records.batch(RECORD, uow, operations, create=ActivityFields, atomic=atomic)
