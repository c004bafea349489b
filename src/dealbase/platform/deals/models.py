from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from dealbase.platform.customers.models import Customer, CustomerFields
from dealbase.platform.validation import (
    ExternalId,
    LongText,
    Moment,
    RequiredShortText,
    ShortText,
    Volume,
    partial,
)

MAX_CUSTOMERS_PER_DEAL = 100


class DealCreate(BaseModel):
    """A new deal; each element of ``customers`` becomes a new customer linked to it, in order."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: RequiredShortText
    external_id: ExternalId | None = None
    volume: Volume | None = None
    deal_origin: ShortText | None = None
    note: LongText | None = None
    customers: Annotated[list[CustomerFields], Field(max_length=MAX_CUSTOMERS_PER_DEAL)] = []


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


class DealChanges(BaseModel):
    """What PATCH /deals/{id} may set: ``step_id`` moves the deal within its department,
    ``employee_id`` assigns it; the required fields here may be changed but never cleared."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: RequiredShortText
    external_id: ExternalId | None = None
    volume: Volume | None = None
    deal_origin: ShortText | None = None
    note: LongText | None = None
    step_id: uuid.UUID
    employee_id: uuid.UUID | None = None


# Absent fields stay, null clears (employee_id: null unassigns).
DealPatch = partial(DealChanges, "DealPatch")


# A deal without a volume sorts as the smallest.
DealOrder = Literal["created_asc", "created_desc", "volume_asc", "volume_desc"]


class DealFilter(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

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


class CustomerLink(BaseModel):
    """POST /deals/{id}/customers: links an existing customer of the deal's department."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    customer_id: uuid.UUID
