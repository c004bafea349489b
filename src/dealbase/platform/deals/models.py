from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from dealbase.platform.customers.models import Customer, CustomerFields
from dealbase.platform.validation import (
    LongText,
    RequiredShortText,
    ShortText,
    Volume,
    refuse_null,
)

MAX_CUSTOMERS_PER_DEAL = 100


class DealCreate(BaseModel):
    """A new deal; each element of ``customers`` becomes a new customer linked to it, in order."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: RequiredShortText
    volume: Volume | None = None
    deal_origin: ShortText | None = None
    note: LongText | None = None
    customers: Annotated[list[CustomerFields], Field(max_length=MAX_CUSTOMERS_PER_DEAL)] = []


@dataclass(frozen=True, slots=True)
class Deal:
    id: uuid.UUID
    department_id: uuid.UUID
    step_id: uuid.UUID
    employee_id: uuid.UUID | None
    employee_name: str | None
    name: str
    volume: int | None
    deal_origin: str | None
    note: str | None
    created_at: datetime
    updated_at: datetime
    version: int
    customers: tuple[Customer, ...]


class DealPatch(BaseModel):
    """PATCH /deals/{id}: absent fields stay, ``null`` clears; ``step_id`` moves the deal within
    its department, ``employee_id`` assigns it (``null`` unassigns)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: RequiredShortText | None = None
    volume: Volume | None = None
    deal_origin: ShortText | None = None
    note: LongText | None = None
    step_id: uuid.UUID | None = None
    employee_id: uuid.UUID | None = None

    _not_cleared = field_validator("name", "step_id", mode="before")(refuse_null)


class DealFilter(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    step_id: uuid.UUID | None = None
    employee_id: uuid.UUID | None = None
    customer_id: uuid.UUID | None = None
    updated_since: AwareDatetime | None = None


class CustomerLink(BaseModel):
    """POST /deals/{id}/customers: links an existing customer of the deal's department."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    customer_id: uuid.UUID
