from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from dealbase.platform.customers.models import Customer, CustomerFields
from dealbase.platform.validation import (
    ClientInput,
    CustomFieldValues,
    ExternalId,
    LongText,
    Moment,
    RequiredShortText,
    ShortText,
    Volume,
    partial,
)

MAX_CUSTOMERS_PER_DEAL = 100


class DealFields(ClientInput):
    """A deal's own fields, which creating, changing and upserting a deal all take first."""

    name: RequiredShortText
    external_id: ExternalId | None = None
    volume: Volume | None = None
    deal_origin: ShortText | None = None
    note: LongText | None = None


class DealCreate(DealFields):
    """A new deal; each element of ``customers`` becomes a new customer linked to it, in order."""

    customers: Annotated[list[CustomerFields], Field(max_length=MAX_CUSTOMERS_PER_DEAL)] = []
    custom_fields: CustomFieldValues | None = None


@dataclass(frozen=True, slots=True)
class Deal:
    """A deal, its attributes in the order the integration document lists a deal's response
    (the REST wire model takes its fields, in this order, from here)."""

    id: uuid.UUID
    external_id: str | None
    name: str
    volume: int | None
    deal_origin: str | None
    employee_id: uuid.UUID | None
    employee_name: str | None
    step_id: uuid.UUID
    department_id: uuid.UUID
    note: str | None
    created_at: datetime
    updated_at: datetime
    version: int
    customers: tuple[Customer, ...]


class DealChanges(DealFields):
    """What PATCH /deals/{id} may set: ``step_id`` moves the deal within its department,
    ``employee_id`` assigns it; the required fields here may be changed but never cleared."""

    step_id: uuid.UUID
    employee_id: uuid.UUID | None = None
    custom_fields: CustomFieldValues | None = None


# Absent fields stay, null clears (employee_id: null unassigns).
DealPatch = partial(DealChanges, "DealPatch")


class DealUpsert(DealFields):
    """PUT /deals/by-external-id/{external_id} and a batch's ``upsert``: what creating the deal
    takes, so the same body serves both cases, without ``customers`` (a sync upserts its
    customers first, then its deals, then links them: POST /deals/{id}/customers).

    A new deal starts in ``step_id`` (a step of the department), else in the department's first
    step, assigned to ``employee_id`` if given. An existing one changes only the fields the body
    gives, as PATCH does; ``step_id`` may be omitted but is never null (a deal is always in a
    step)."""

    # None only when absent: null is refused below, and the schema shows no null.
    step_id: Annotated[uuid.UUID | None, WithJsonSchema({"type": "string", "format": "uuid"})] = (
        None
    )
    employee_id: uuid.UUID | None = None
    custom_fields: CustomFieldValues | None = None

    @field_validator("step_id", mode="before")
    @classmethod
    def _step_never_null(cls, value: object) -> object:
        if value is None:
            raise PydanticCustomError(
                "cannot_clear",
                "step_id cannot be null: omit it to keep the deal's step (a new deal starts in"
                " the department's first step)",
            )
        return value


# A deal without a volume sorts as the smallest.
DealOrder = Literal["created_asc", "created_desc", "volume_asc", "volume_desc"]


class DealFilter(ClientInput):
    external_id: ExternalId | None = None
    step_id: uuid.UUID | None = None
    employee_id: uuid.UUID | None = None
    customer_id: uuid.UUID | None = None
    updated_since: Moment | None = None
    created_after: Moment | None = None
    created_before: Moment | None = None
    volume_min: Volume | None = None
    volume_max: Volume | None = None
    order_by: DealOrder = "created_asc"


class CustomerLink(ClientInput):
    """POST /deals/{id}/customers: links an existing customer of the deal's department."""

    customer_id: uuid.UUID
