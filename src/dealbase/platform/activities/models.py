from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from dealbase.platform.validation import (
    ClientInput,
    CustomFieldValues,
    ExternalId,
    LongText,
    Moment,
    ShortText,
    partial,
)

ActivityType = Literal["call", "email", "meeting", "task", "note"]


class ActivityFields(ClientInput):
    """An activity about a customer of the department, optionally about one of its deals and
    done by one of its employees."""

    type: ActivityType
    external_id: ExternalId | None = None
    subject: ShortText | None = None
    note: LongText | None = None
    due_at: Moment | None = None
    done_at: Moment | None = None
    customer_id: uuid.UUID
    deal_id: uuid.UUID | None = None
    employee_id: uuid.UUID | None = None
    custom_fields: CustomFieldValues | None = None


# PATCH /activities/{id}: absent fields stay, null clears; type and customer_id cannot be cleared.
ActivityPatch = partial(ActivityFields, "ActivityPatch")


class ActivityFilter(ClientInput):
    external_id: ExternalId | None = None
    customer_id: uuid.UUID | None = None
    deal_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Activity:
    id: uuid.UUID
    external_id: str | None
    department_id: uuid.UUID
    type: ActivityType
    subject: str | None
    note: str | None
    due_at: datetime | None
    done_at: datetime | None
    customer_id: uuid.UUID
    deal_id: uuid.UUID | None
    employee_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    version: int
