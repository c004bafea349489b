"""A tenant's custom fields as its records carry them, in ``custom_fields``: each live field's
value as a client sends it (its type's rules, a select's live options), its column of the
record's table, and how its JSON shows it.

A record's fields model is made again for each tenant's fields (``input_models``): the record's
own model with ``custom_fields`` typed field by field, which refuses a field the tenant has not
defined, and whose values dump as the columns that hold them (``cf_<name>``), so that the
statements every record's writes are made of write them as any other column.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from datetime import date
from decimal import Decimal
from typing import Annotated, Any

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    create_model,
    model_serializer,
)
from pydantic_core import PydanticCustomError
from sqlalchemy import Column, Date, MetaData, Table, Text
from sqlalchemy.dialects.postgresql import TIMESTAMP, UUID
from sqlalchemy.types import TypeEngine, UserDefinedType

from dealbase.platform.custom_fields.models import CustomField, FieldType
from dealbase.platform.custom_fields.rules import IMPLIED_MAX_LENGTH, column_name
from dealbase.platform.shapes import CUSTOM_FIELDS, InColumn, Kind, Nested, Shape, ShapeField
from dealbase.platform.validation import ClientInput, EmailText, Moment, UrlText, text_of

# The JSON a field's value is shown as, by its type.
KINDS: Mapping[FieldType, Kind] = {
    FieldType.TEXT: Kind.AS_IS,
    FieldType.EMAIL: Kind.AS_IS,
    FieldType.URL: Kind.AS_IS,
    FieldType.INTEGER: Kind.WHOLE,
    FieldType.DECIMAL: Kind.DECIMAL,
    FieldType.BOOLEAN: Kind.AS_IS,
    FieldType.DATE: Kind.DATE,
    FieldType.TIMESTAMP: Kind.TIMESTAMP,
    FieldType.SINGLE_SELECT: Kind.ID,
    FieldType.MULTI_SELECT: Kind.IDS,
}


class Numeric(UserDefinedType[Decimal]):
    """``numeric``, read as the driver reads it (a Decimal): SQLAlchemy's own Numeric converts
    results by their column's type code, which a statement compiled once does not know."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "numeric"


class Flag(UserDefinedType[bool]):
    """``boolean``, bound as the driver binds a bool: SQLAlchemy's Boolean checks each value
    in Python, which the field's rules have judged already."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "boolean"


class OptionIds(UserDefinedType[list[str]]):
    """``uuid[]``, option ids (a multi select's values, a select's filter) as JSON gives them,
    bound as PostgreSQL's array text (``{a,b}``): SQLAlchemy's ARRAY and psycopg's list dumper
    convert a list element by element in Python."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "uuid[]"

    def bind_processor(self, dialect: Any) -> Callable[[Any], str | None]:
        return _array_text


def _array_text(ids: list[str] | None) -> str | None:
    # A UUID's text needs no quoting in an array's text.
    return None if ids is None else "{" + ",".join(ids) + "}"


# The column's type as SQLAlchemy declares it (``rules.SQL_TYPES`` as PostgreSQL names it).
COLUMN_TYPES: Mapping[FieldType, TypeEngine[Any]] = {
    FieldType.TEXT: Text(),
    FieldType.EMAIL: Text(),
    FieldType.URL: Text(),
    FieldType.INTEGER: Numeric(),
    FieldType.DECIMAL: Numeric(),
    FieldType.BOOLEAN: Flag(),
    FieldType.DATE: Date(),
    FieldType.TIMESTAMP: TIMESTAMP(timezone=True),
    FieldType.SINGLE_SELECT: UUID(as_uuid=True),
    FieldType.MULTI_SELECT: OptionIds(),
}

# A bigint's range: what every client's integer type holds.
WHOLE_LIMIT = 2**63 - 1
# A decimal's digits: more than any currency or measure needs, and each exact.
DECIMAL_DIGITS = 30
DECIMAL_PLACES = 10


# Options are compared by their ids' integers: a UUID hashes and compares in Python.
def _live_option(live: frozenset[int]) -> Any:
    def check(value: uuid.UUID) -> uuid.UUID:
        if value.int not in live:
            raise PydanticCustomError(
                "not_an_option", "must be the id of one of the field's options"
            )
        return value

    return AfterValidator(check)


def _distinct(values: list[uuid.UUID]) -> list[uuid.UUID]:
    if len({value.int for value in values}) != len(values):
        raise PydanticCustomError("duplicate_item", "must not name an option twice")
    return values


def value_type(field: CustomField) -> Any:
    """The type a value of ``field`` is judged by, null aside."""
    kind = field.type
    if kind is FieldType.TEXT:
        max_length = field.max_length or IMPLIED_MAX_LENGTH.get(kind, 255)
        return text_of(max_length)
    if kind is FieldType.EMAIL:
        return EmailText
    if kind is FieldType.URL:
        return UrlText
    if kind is FieldType.INTEGER:
        return Annotated[StrictInt, Field(ge=-WHOLE_LIMIT, le=WHOLE_LIMIT)]
    if kind is FieldType.DECIMAL:
        return Annotated[
            Decimal,
            Field(
                max_digits=DECIMAL_DIGITS,
                decimal_places=DECIMAL_PLACES,
                allow_inf_nan=False,
                strict=False,
            ),
        ]
    if kind is FieldType.BOOLEAN:
        return StrictBool
    if kind is FieldType.DATE:
        return date
    if kind is FieldType.TIMESTAMP:
        return Moment
    live = frozenset(option.id.int for option in field.options or () if not option.archived)
    option = Annotated[uuid.UUID, _live_option(live)]
    if kind is FieldType.SINGLE_SELECT:
        return option
    return Annotated[list[option], Field(max_length=len(live)), AfterValidator(_distinct)]


class _AsColumns(BaseModel):
    """A record's fields model whose ``custom_fields`` dump as their columns, beside the
    record's own fields."""

    @model_serializer(mode="wrap")
    def _columns(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        values = dumped.pop(CUSTOM_FIELDS, None) or {}
        dumped.update((column_name(name), value) for name, value in values.items())
        return dumped


def values_model(name: str, fields: tuple[CustomField, ...], *, partial: bool) -> type[BaseModel]:
    """``custom_fields``' object: each field by its name, of its type or null; a required
    field given (``partial``: absent or not null). Dumped by alias, each names its column."""
    typed: dict[str, Any] = {}
    for field in fields:
        kind = value_type(field) if field.required else value_type(field) | None
        column = Field(serialization_alias=column_name(field.name))
        required = field.required and not partial
        typed[field.name] = (Annotated[kind, column], ... if required else None)
    made: type[BaseModel] = create_model(name, __base__=ClientInput, **typed)
    return made


def input_models(
    record: type[BaseModel],
    patch: type[BaseModel],
    fields: tuple[CustomField, ...],
    values: type[BaseModel],
    changes: type[BaseModel],
) -> tuple[type[BaseModel], type[BaseModel]]:
    """The record's fields model (``record``: a create's and an upsert's) and its PATCH model
    (``patch``), ``custom_fields`` typed by ``values`` and ``changes`` (``values_model``'s of
    ``fields``; none: no key is a field)."""
    required = any(field.required for field in fields)
    given: Any = (values, ...) if required else (values | None, None)
    full: type[BaseModel] = create_model(
        f"{record.__name__}WithCustomFields", __base__=(record, _AsColumns), custom_fields=given
    )
    optional: Any = (changes | None, None)
    patched: type[BaseModel] = create_model(
        f"{patch.__name__}WithCustomFields", __base__=(patch, _AsColumns), custom_fields=optional
    )
    return full, patched


def extended_table(table: Table, fields: tuple[CustomField, ...]) -> Table:
    """``table`` with a column for each of ``fields``: its columns as statements name them (no
    constraint or default, which only the DDL needs)."""
    return Table(
        table.name,
        MetaData(),
        *(Column(column.name, column.type, primary_key=column.primary_key) for column in table.c),
        *(Column(column_name(field.name), COLUMN_TYPES[field.type]) for field in fields),
        schema=table.schema,
    )


def extended_shape(shape: Shape, table: Table, fields: tuple[CustomField, ...]) -> Shape:
    """``shape`` of ``table`` (``extended_table``'s) with ``custom_fields`` last: every field by
    its name, null when the record has no value."""
    nested = tuple(
        ShapeField(field.name, KINDS[field.type], InColumn(column_name(field.name)))
        for field in fields
    )
    return Shape(table, (*shape.fields, ShapeField(CUSTOM_FIELDS, Kind.OBJECT, Nested(nested))))


def json_text(values: Mapping[str, object]) -> bytes:
    """``values`` (a client's, parsed) as JSON text again, for a model to judge them by JSON's
    rules."""
    try:
        return orjson.dumps(values)
    except orjson.JSONEncodeError:
        # An integer past 64 bits, which orjson does not write: its field's type refuses it.
        return json.dumps(values).encode()


def values_of_row(fields: tuple[CustomField, ...], row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's custom values by field name (a read model's ``custom_fields``)."""
    return {field.name: row[column_name(field.name)] for field in fields}
