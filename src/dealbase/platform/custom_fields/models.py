"""A custom field's definition as a client writes it and as it is read back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from dealbase.platform.validation import ClientInput, RequiredShortText, partial

# The records a tenant may give fields to, as the API names them.
RecordKind = Literal["customer", "deal", "activity"]

FIELD_NAME_MAX_LENGTH = 48
FIELD_NAME_PATTERN = rf"^[a-z][a-z0-9_]{{0,{FIELD_NAME_MAX_LENGTH - 1}}}$"
LABEL_MAX_LENGTH = 100
TEXT_MAX_LENGTH_LIMIT = 10_000
OPTIONS_LIMIT = 200


class FieldType(StrEnum):
    TEXT = "text"
    INTEGER = "integer"
    DECIMAL = "decimal"
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp"
    SINGLE_SELECT = "single_select"
    MULTI_SELECT = "multi_select"
    EMAIL = "email"
    URL = "url"


FieldName = Annotated[
    str,
    Field(
        max_length=FIELD_NAME_MAX_LENGTH,
        pattern=FIELD_NAME_PATTERN,
        description="The field's API name: a lowercase letter, then lowercase letters, digits"
        " and underscores. It never changes.",
    ),
]
Label = Annotated[RequiredShortText, Field(max_length=LABEL_MAX_LENGTH)]
TextMaxLength = Annotated[int, Field(ge=1, le=TEXT_MAX_LENGTH_LIMIT)]


class OptionFields(ClientInput):
    """A select's option: new without ``id``; an existing one named by its ``id``."""

    id: uuid.UUID | None = Field(None, description="An existing option's id.")
    label: Label
    archived: bool = False


Options = Annotated[list[OptionFields], Field(min_length=1, max_length=OPTIONS_LIMIT)]


class CustomFieldFields(ClientInput):
    """A field to define. ``max_length`` is a text field's (255 unless given); ``options`` a
    select's; ``unique`` makes the field's values unique in a department; ``filterable``
    indexes it for list filters."""

    record: RecordKind
    name: FieldName
    label: Label
    type: FieldType
    max_length: TextMaxLength | None = None
    options: Options | None = None
    required: bool = False
    unique: bool = False
    filterable: bool = False


class CustomFieldChangeFields(ClientInput):
    """What may change of a field: all but its record and its name."""

    label: Label
    type: FieldType
    max_length: TextMaxLength | None = None
    options: Options | None = None
    required: bool = False
    unique: bool = False
    filterable: bool = False
    archived: bool = False


# PATCH /custom-fields/{id}: absent fields stay as they are.
CustomFieldPatch = partial(CustomFieldChangeFields, "CustomFieldPatch")


@dataclass(frozen=True, slots=True)
class Option:
    id: uuid.UUID
    label: str
    archived: bool


@dataclass(frozen=True, slots=True)
class Settable:
    """What a field's definition holds besides its id, record and name: what a change sets."""

    label: str
    type: FieldType
    max_length: int | None
    options: tuple[Option, ...] | None
    required: bool
    unique: bool
    filterable: bool
    archived: bool


@dataclass(frozen=True, slots=True)
class CustomField:
    """A field as it is read back."""

    id: uuid.UUID
    record: RecordKind
    name: str
    label: str
    type: FieldType
    max_length: int | None
    options: tuple[Option, ...] | None
    required: bool
    unique: bool
    filterable: bool
    archived: bool
    version: int
    created_at: datetime
    updated_at: datetime

    def settable(self) -> Settable:
        return Settable(
            self.label,
            self.type,
            self.max_length,
            self.options,
            self.required,
            self.unique,
            self.filterable,
            self.archived,
        )
