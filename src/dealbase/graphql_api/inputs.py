"""GraphQL input types; each becomes the platform's input model through ``fields_of``, so
GraphQL and REST validate by the same rules."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import date, datetime
from enum import Enum
from typing import Any

import strawberry

from dealbase.graphql_api.types import ActivityType, BigInt


def fields_of(value: object) -> dict[str, Any]:
    """The fields the client gave, as the platform names them: absent (UNSET) fields are left
    out, so a PATCH-like input tells 'leave as it is' from 'clear' (null)."""
    found = {}
    for item in dataclasses.fields(value):  # type: ignore[arg-type]
        given = getattr(value, item.name)
        if given is strawberry.UNSET:
            continue
        found[item.name] = given.value if isinstance(given, Enum) else given
    return found


@strawberry.input
class CustomerInput:
    last_name: str
    first_name: str | None = strawberry.UNSET
    company: str | None = strawberry.UNSET
    website: str | None = strawberry.UNSET
    title: str | None = strawberry.UNSET
    phone_1: str | None = strawberry.UNSET
    phone_2: str | None = strawberry.UNSET
    phone_3: str | None = strawberry.UNSET
    phone_1_label: str | None = strawberry.UNSET
    phone_2_label: str | None = strawberry.UNSET
    phone_3_label: str | None = strawberry.UNSET
    email: str | None = strawberry.UNSET
    postcode: str | None = strawberry.UNSET
    address: str | None = strawberry.UNSET
    address_addition: str | None = strawberry.UNSET
    city: str | None = strawberry.UNSET
    country: str | None = strawberry.UNSET
    state: str | None = strawberry.UNSET
    contact_origin: str | None = strawberry.UNSET
    birthday: date | None = strawberry.UNSET
    note: str | None = strawberry.UNSET


@strawberry.input(description="Absent fields stay as they are; null clears (not lastName).")
class CustomerChanges(CustomerInput):
    last_name: str | None = strawberry.UNSET  # type: ignore[assignment]


@strawberry.input
class DealInput:
    name: str
    volume: BigInt | None = strawberry.UNSET
    deal_origin: str | None = strawberry.UNSET
    note: str | None = strawberry.UNSET
    customers: list[CustomerInput] | None = strawberry.UNSET


@strawberry.input(description="Absent fields stay as they are; null clears (not name or stepId).")
class DealChanges:
    name: str | None = strawberry.UNSET
    volume: BigInt | None = strawberry.UNSET
    deal_origin: str | None = strawberry.UNSET
    note: str | None = strawberry.UNSET
    step_id: uuid.UUID | None = strawberry.UNSET
    employee_id: uuid.UUID | None = strawberry.UNSET


@strawberry.input
class ActivityInput:
    type: ActivityType
    customer_id: uuid.UUID
    subject: str | None = strawberry.UNSET
    note: str | None = strawberry.UNSET
    due_at: datetime | None = strawberry.UNSET
    done_at: datetime | None = strawberry.UNSET
    deal_id: uuid.UUID | None = strawberry.UNSET
    employee_id: uuid.UUID | None = strawberry.UNSET


@strawberry.input(description="Absent fields stay as they are; null clears (not type, customerId).")
class ActivityChanges:
    type: ActivityType | None = strawberry.UNSET
    customer_id: uuid.UUID | None = strawberry.UNSET
    subject: str | None = strawberry.UNSET
    note: str | None = strawberry.UNSET
    due_at: datetime | None = strawberry.UNSET
    done_at: datetime | None = strawberry.UNSET
    deal_id: uuid.UUID | None = strawberry.UNSET
    employee_id: uuid.UUID | None = strawberry.UNSET


@strawberry.input
class CustomerFilter:
    email: str | None = strawberry.UNSET
    q: str | None = strawberry.UNSET
    updated_since: datetime | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET


@strawberry.input
class DealFilter:
    step_id: uuid.UUID | None = strawberry.UNSET
    employee_id: uuid.UUID | None = strawberry.UNSET
    customer_id: uuid.UUID | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET
    updated_since: datetime | None = strawberry.UNSET
    created_after: datetime | None = strawberry.UNSET
    created_before: datetime | None = strawberry.UNSET
    volume_min: BigInt | None = strawberry.UNSET
    volume_max: BigInt | None = strawberry.UNSET


@strawberry.enum
class DealOrder(Enum):
    CREATED_ASC = "created_asc"
    CREATED_DESC = "created_desc"
    VOLUME_ASC = "volume_asc"
    VOLUME_DESC = "volume_desc"


@strawberry.input
class ActivityFilter:
    customer_id: uuid.UUID | None = strawberry.UNSET
    deal_id: uuid.UUID | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET
