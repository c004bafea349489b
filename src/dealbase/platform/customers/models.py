from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from dealbase.platform.validation import (
    EMAIL_MAX_LENGTH,
    SHORT_TEXT,
    ClientInput,
    CustomFieldValues,
    EmailText,
    ExternalId,
    LongText,
    Moment,
    PhoneText,
    PlainText,
    RequiredShortText,
    ShortText,
    UrlText,
    partial,
)

EARLIEST_BIRTHDAY = date(1850, 1, 1)


def _possible_birthday(value: date) -> date:
    if value < EARLIEST_BIRTHDAY or value > date.today():
        raise PydanticCustomError(
            "out_of_range",
            "must be a date between {earliest} and today",
            {"earliest": str(EARLIEST_BIRTHDAY)},
        )
    return value


Birthday = Annotated[date, AfterValidator(_possible_birthday)]


class CustomerFields(ClientInput):
    """The client-settable fields of a customer, as the integration document names them."""

    last_name: RequiredShortText
    external_id: ExternalId | None = None
    first_name: ShortText | None = None
    company: ShortText | None = None
    website: UrlText | None = None
    title: ShortText | None = None
    phone_1: PhoneText | None = None
    phone_2: PhoneText | None = None
    phone_3: PhoneText | None = None
    phone_1_label: ShortText | None = None
    phone_2_label: ShortText | None = None
    phone_3_label: ShortText | None = None
    email: EmailText | None = None
    postcode: ShortText | None = None
    address: ShortText | None = None
    address_addition: ShortText | None = None
    city: ShortText | None = None
    country: ShortText | None = None
    state: ShortText | None = None
    contact_origin: ShortText | None = None
    birthday: Birthday | None = Field(
        default=None, description="A real calendar date between 1850-01-01 and today."
    )
    note: LongText | None = None
    custom_fields: CustomFieldValues | None = None


@dataclass(frozen=True, slots=True)
class Customer:
    id: uuid.UUID
    external_id: str | None
    tenant_id: uuid.UUID
    department_id: uuid.UUID
    last_name: str
    first_name: str | None
    company: str | None
    website: str | None
    title: str | None
    phone_1: str | None
    phone_2: str | None
    phone_3: str | None
    phone_1_label: str | None
    phone_2_label: str | None
    phone_3_label: str | None
    email: str | None
    postcode: str | None
    address: str | None
    address_addition: str | None
    city: str | None
    country: str | None
    state: str | None
    contact_origin: str | None
    birthday: date | None
    note: str | None
    created_at: datetime
    updated_at: datetime
    version: int


# PATCH /customers/{id}: absent fields stay, null clears, last_name cannot be cleared.
CustomerPatch = partial(CustomerFields, "CustomerPatch")


class CustomerFilter(ClientInput):
    external_id: ExternalId | None = None
    email: Annotated[PlainText, Field(max_length=EMAIL_MAX_LENGTH)] | None = None
    q: Annotated[PlainText, Field(min_length=1, max_length=SHORT_TEXT)] | None = None
    updated_since: Moment | None = None
