"""Activities: their descriptor (``RECORD``, whose verbs are those of every synced record), their
create, and the first activities of many deals or customers."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from dealbase.db.units import UnitOfWork
from dealbase.errors import ExternalIdTaken
from dealbase.platform import records
from dealbase.platform.activities import repository
from dealbase.platform.activities.models import (
    Activity,
    ActivityFields,
    ActivityFilter,
    ActivityPatch,
)
from dealbase.platform.events import service as events
from dealbase.platform.record_writes import IN_BULK
from dealbase.platform.resources import ACTIVITY
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.platform.validation import department_of

RECORD: records.SyncedRecord[Activity, ActivityFields, ActivityFilter] = records.SyncedRecord(
    noun="activity",
    to_model=lambda uow, row: repository.to_activity(row),
    read=lambda uow, activity_id: repository.get_activity(
        uow.connection, uow.scope.department_id, activity_id
    ),
    lists=records.Listing(
        models=lambda uow, filters, page, narrowed: repository.list_activities(
            uow.connection, uow.scope.department_id, filters, page, narrowed
        ),
        texts=lambda uow, filters, page, completed: repository.list_activities_as_json(
            uow.connection, uow.scope.department_id, filters, page, completed
        ),
        filtering=repository.ACTIVITY_FILTERS,
    ),
    shape=ACTIVITY,
    create_model=ActivityFields,
    upsert_model=ActivityFields,
    patch_model=ActivityPatch,
    writes=IN_BULK,
    references=repository.REFERENCES,
)


def create(uow: UnitOfWork, fields: ActivityFields) -> Activity:
    """The new activity (activity.created). An external id another activity of the department
    has is ExternalIdTaken."""
    department_id = department_of(uow.scope)
    record = RECORD.fitted(uow)
    values = {**fields.model_dump(exclude={CUSTOM_FIELDS}), **record.created_columns(fields)}
    RECORD.check_references(uow, department_id, values)
    activity = repository.insert_activity(
        uow.connection,
        department_id,
        values,
        record.shape.table,
        lambda row: record.to_model(uow, row),
    )
    if activity is None:
        raise ExternalIdTaken(
            f"Another activity of the department has the external id {fields.external_id!r};"
            " to change that activity, upsert it by its external id."
        )
    events.record(uow, "activity.created", department_id, record.as_json(activity))
    return activity


def first_of(
    uow: UnitOfWork, parent: str, parent_ids: Sequence[uuid.UUID], per_parent: int
) -> dict[uuid.UUID, list[Activity]]:
    """The first activities of each deal (``parent="deal_id"``) or customer (``"customer_id"``),
    in one statement for all of them."""
    return repository.first_of(
        uow.connection, parent, parent_ids, uow.scope.department_id, per_parent
    )
