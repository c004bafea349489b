"""A record's JSON shape, declared once (``shape_of``), and each way it is made: the JSON object
of a read model in Python (``Shape.as_json``), and the same JSON made by PostgreSQL of a row
(``Shape.json_of_row``, ``Shape.text_of_row``) or of the values a statement writes
(``Shape.json_of_values``).

A shape is its read model's attributes (a platform dataclass) in their order, but the hidden
ones. Each one's kind is its type there (an id, a date, a moment, a tuple of another record, or
text and numbers as JSON has them), and its value the column of the record's table of the same
name, unless the declaration gives another source (``TENANT_ID``, ``LookedUp``, ``Linked``). A
field added to the read model, its column in the table, is in every rendering.
"""

from __future__ import annotations

import dataclasses
import operator
import types
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from sqlalchemy import (
    TIMESTAMP,
    ColumnElement,
    Date,
    FromClause,
    Table,
    Text,
    bindparam,
    cast,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import JSON, UUID, aggregate_order_by

JsonObject = dict[str, Any]


def format_timestamp(value: datetime) -> str:
    """ISO 8601 in UTC with exactly six fractional digits and ``Z``, as the document's rule 3."""
    # isoformat, unlike strftime's %Y, pads years before 1000 to four digits.
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def json_value(value: object) -> Any:
    """One attribute of a read model as JSON shows it."""
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, uuid.UUID | date):
        return str(value)
    return value


class Kind(Enum):
    """How a field's value is written in the JSON."""

    AS_IS = "as_is"  # text, numbers and a kind's name, as JSON has them
    ID = "id"  # a UUID as its text
    DATE = "date"  # YYYY-MM-DD
    TIMESTAMP = "timestamp"  # UTC with six fractional digits and Z (``format_timestamp``)
    LIST = "list"  # records of another shape, in their order (``Linked``)
    WHOLE = "whole"  # an integer a numeric column holds, as a JSON number
    DECIMAL = "decimal"  # a numeric, as its text in a JSON string (no float's rounding)
    IDS = "ids"  # an array of UUIDs, each as its text
    OBJECT = "object"  # an object of further fields (``Nested``)


@dataclass(frozen=True)
class TenantId:
    """The caller's tenant's id, which no row holds: in SQL the parameter ``tenant_id``."""


TENANT_ID = TenantId()


@dataclass(frozen=True)
class LookedUp:
    """A column of the row of ``table`` whose id the record's column ``key`` holds, or null (a
    deal's employee's name)."""

    table: Table
    key: str
    value: str


@dataclass(frozen=True)
class Linked:
    """The records of ``shape`` that rows of ``links`` link to the record (``parent`` naming
    it, ``child`` them), in the order of the links' ``order`` (a deal's customers)."""

    shape: Shape
    links: Table
    parent: str
    child: str
    order: str


# A tenant's custom field's column: ``cf_<name>``, shown in its record's JSON as
# ``custom_fields.<name>`` (``custom_fields.values``); no record's own column starts so.
CUSTOM_COLUMN_PREFIX = "cf_"
CUSTOM_FIELDS = "custom_fields"


def json_name(column: str) -> str:
    """The dotted name in the record's JSON of the field of ``column`` (an event's
    ``changed_fields`` names it so)."""
    if column.startswith(CUSTOM_COLUMN_PREFIX):
        return f"{CUSTOM_FIELDS}.{column.removeprefix(CUSTOM_COLUMN_PREFIX)}"
    return column


def has_custom_columns(table: Table) -> bool:
    return any(column.name.startswith(CUSTOM_COLUMN_PREFIX) for column in table.c)


@dataclass(frozen=True)
class InColumn:
    """The record's column ``name``, of another name than the field's (a custom field's)."""

    name: str


@dataclass(frozen=True)
class Nested:
    """An object of ``fields``, each the value of a column of the record (a tenant's custom
    fields, ``custom_fields.values``)."""

    fields: tuple[ShapeField, ...]


# Where a field's value comes from: None for the record's column of its name.
Source = TenantId | LookedUp | Linked | InColumn | Nested | None


@dataclass(frozen=True, slots=True)
class ShapeField:
    name: str
    kind: Kind
    source: Source = None


def decimal_text(value: Decimal) -> str:
    """A numeric as PostgreSQL writes it: positional, its scale kept (never ``1E-7``)."""
    return format(value, "f")


# A field's value in Python as JSON shows it, by kind (None: as it is).
_PYTHON: Mapping[Kind, Callable[[Any], Any] | None] = {
    Kind.AS_IS: None,
    Kind.ID: str,
    Kind.DATE: date.isoformat,
    Kind.TIMESTAMP: format_timestamp,
    Kind.WHOLE: int,
    Kind.DECIMAL: decimal_text,
    Kind.IDS: lambda ids: [str(each) for each in ids],
}
# Written into the statement's text rather than bound: the driver adapts each bound value on
# every run of a statement.
_UTC = literal_column("'UTC'", Text)
_TIMESTAMP_TEXT = literal_column("""'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'""", Text)
_DATE_TEXT = literal_column("'YYYY-MM-DD'", Text)


def sql_value(value: ColumnElement[Any], kind: Kind) -> ColumnElement[Any]:
    """``value`` (a column, a parameter, ``now()``) as the JSON shows a value of ``kind``."""
    if kind is Kind.TIMESTAMP:
        return func.to_char(func.timezone(_UTC, value), _TIMESTAMP_TEXT)
    if kind is Kind.DATE:
        return func.to_char(value, _DATE_TEXT)
    if kind is Kind.ID or kind is Kind.DECIMAL:
        return cast(value, Text)
    return value


def column_value(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """A column as the JSON shows it, its kind read from its type (a step's, a department's, an
    event's: objects no read model declares)."""
    kind = column.type
    if isinstance(kind, TIMESTAMP):
        return sql_value(column, Kind.TIMESTAMP)
    if isinstance(kind, Date):
        return sql_value(column, Kind.DATE)
    if isinstance(kind, UUID):
        return sql_value(column, Kind.ID)
    return column


def row_json(row: FromClause, named: list[tuple[str, ColumnElement[Any]]]) -> ColumnElement[Any]:
    """The object of ``named``'s names and values, in their order, as ``json``: ``row_to_json``
    of a row of one column per name (the names are the read model's own identifiers), computed
    from ``row``. It costs PostgreSQL less than ``json_build_object`` of the same pairs, which
    looks up each argument's type on every call, and writes no spaces."""
    shown = select(*(value.label(name) for name, value in named)).correlate(row).subquery("shown")
    return select(func.row_to_json(literal_column("shown"))).select_from(shown).scalar_subquery()


_CLOSING = literal_column("'}'", Text)


def _name(name: str) -> ColumnElement[Any]:
    # The names are the read model's own identifiers, written as they are.
    return literal_column(f"'{name}'")


@dataclass(frozen=True)
class Shape:
    """A record's JSON: its ``fields`` in order, values of rows of ``table``."""

    table: Table
    fields: tuple[ShapeField, ...]
    # The JSON object of a read model (its attributes of the fields' names).
    as_json: Callable[[Any], JsonObject] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for each in self.fields:
            column = _column_name(each)
            if column is not None and column not in self.table.c:
                raise ValueError(f"{self.table.name} has no column {column}")
            if (each.kind is Kind.LIST) != isinstance(each.source, Linked):
                raise ValueError(f"{each.name}: a list is its Linked records, and only it")
            if (each.kind is Kind.OBJECT) != isinstance(each.source, Nested):
                raise ValueError(f"{each.name}: an object is its Nested fields, and only it")
        object.__setattr__(self, "as_json", _python(self.fields))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(each.name for each in self.fields)

    def json_of_row(self, row: FromClause) -> ColumnElement[Any]:
        """The JSON of ``row`` (the table, an alias, or a CTE or subquery returning its
        columns), made by PostgreSQL as ``json``: ``row_json`` of it."""
        return row_json(row, [(each.name, self._of_row(each, row)) for each in self.fields])

    def text_of_row(self, row: FromClause) -> ColumnElement[str]:
        """``json_of_row`` as text."""
        return cast(self.json_of_row(row), Text)

    @property
    def derived(self) -> Mapping[str, Callable[[FromClause], ColumnElement[Any]]]:
        """The values no column of a row holds but the tenant's id or a looked-up one, made of a
        row: what a read of the record's values besides its columns reads (GraphQL's)."""
        return {
            each.name: self._made_of_row(each)
            for each in self.fields
            if isinstance(each.source, TenantId | LookedUp)
        }

    def _made_of_row(self, each: ShapeField) -> Callable[[FromClause], ColumnElement[Any]]:
        return lambda row: self._of_row(each, row)

    def _of_row(self, each: ShapeField, row: FromClause) -> ColumnElement[Any]:
        source = each.source
        column = _column_name(each)
        if column is not None:
            return sql_value(row.c[column], each.kind)
        if isinstance(source, Nested):
            return row_json(
                row, [(field.name, self._of_row(field, row)) for field in source.fields]
            )
        if isinstance(source, TenantId):
            return bindparam("tenant_id", type_=Text)
        if isinstance(source, LookedUp):
            other = source.table.alias()
            found = (
                select(other.c[source.value])
                .where(other.c.id == row.c[source.key])
                .correlate(row)
                .scalar_subquery()
            )
            return sql_value(found, each.kind)
        # Each link's record by its key: a record has few.
        assert isinstance(source, Linked)
        links, child = source.links.alias(), source.shape.table.alias()
        item = (
            select(source.shape.json_of_row(child))
            .where(child.c.id == links.c[source.child])
            .scalar_subquery()
        )
        listed = func.json_agg(aggregate_order_by(item, links.c[source.order]))
        return (
            select(func.coalesce(listed, literal_column("'[]'::json")))
            .where(links.c[source.parent] == row.c.id)
            .correlate(row)
            .scalar_subquery()
        )

    def _of_values(
        self, values: Mapping[str, ColumnElement[Any]]
    ) -> list[tuple[str, ColumnElement[Any]]]:
        return [(each.name, _value_of(each, values)) for each in self.fields]

    def json_of_values(self, values: Mapping[str, ColumnElement[Any]]) -> ColumnElement[Any]:
        """``json_of_row``'s JSON, the same text, of a record given by its values rather than
        read from a row: by name, a value of each field but the tenant's id (parameters,
        ``now()``, a looked-up value, a list's JSON). No subquery: what an ``INSERT ... VALUES``
        that Citus routes whole may hold. Each value is ``to_json``'s, which is
        ``row_to_json``'s of a column."""
        text: ColumnElement[Any] | None = None
        for place, (name, value) in enumerate(self._of_values(values)):
            opening = "{" if place == 0 else ","
            written = func.coalesce(cast(func.to_json(value), Text), literal_column("'null'"))
            piece = literal_column(f"'{opening}\"{name}\":'", Text).concat(written)
            text = piece if text is None else text.concat(piece)
        closed = literal_column("'{}'", Text) if text is None else text.concat(_CLOSING)
        return cast(closed, JSON)

    def built_object_of(self, values: Mapping[str, ColumnElement[Any]]) -> ColumnElement[Any]:
        """``json_of_values``' object as ``json_build_object`` writes it (``"name" : value``):
        the text a deal's create has always answered and recorded."""
        pairs: list[ColumnElement[Any]] = []
        for name, value in self._of_values(values):
            pairs += (_name(name), value)
        return func.json_build_object(*pairs)


def _column_name(each: ShapeField) -> str | None:
    """The record's column holding ``each``'s value, if one does."""
    if each.source is None:
        return each.name
    if isinstance(each.source, InColumn):
        return each.source.name
    return None


def _value_of(each: ShapeField, values: Mapping[str, ColumnElement[Any]]) -> ColumnElement[Any]:
    """``each``'s value of a record given by its values (by column name), as its JSON shows it."""
    source = each.source
    if isinstance(source, TenantId):
        return bindparam("tenant_id", type_=Text)
    if isinstance(source, Nested):
        pairs: list[ColumnElement[Any]] = []
        for field in source.fields:
            pairs += (_name(field.name), _value_of(field, values))
        return func.json_build_object(*pairs)
    return sql_value(values[_column_name(each) or each.name], each.kind)


def _python(fields: tuple[ShapeField, ...]) -> Callable[[Any], JsonObject]:
    """The attributes of ``fields``' names of a read model as JSON shows them. Read all at
    once, and only those neither null nor shown as they are converted: every write route shapes
    its record twice (its event's data and its response)."""
    names = tuple(each.name for each in fields)
    if not names:
        return lambda value: {}
    read = operator.attrgetter(*names)
    shown_as = tuple(_python_of(each) for each in fields)
    pairs = tuple(zip(names, shown_as, strict=True))
    several = len(names) > 1

    def shape(value: object) -> JsonObject:
        items = read(value) if several else (read(value),)
        return {
            name: item if item is None or show is None else show(item)
            for (name, show), item in zip(pairs, items, strict=True)
        }

    return shape


def _python_of(each: ShapeField) -> Callable[[Any], Any] | None:
    """How a value of ``each`` is shown: ``Nested`` fields' values are a mapping of their
    names."""
    if isinstance(each.source, Linked):
        return _listed(each.source.shape)
    if isinstance(each.source, Nested):
        shown = tuple((field.name, _PYTHON[field.kind]) for field in each.source.fields)
        return lambda values: {
            name: value if (value := values.get(name)) is None or show is None else show(value)
            for name, show in shown
        }
    return _PYTHON[each.kind]


def _listed(shape: Shape) -> Callable[[Any], list[JsonObject]]:
    return lambda records: [shape.as_json(record) for record in records]


def _kind(hint: Any) -> Kind:
    """The kind of an attribute of type ``hint`` (optional or not)."""
    if get_origin(hint) in (Union, types.UnionType):
        given = [each for each in get_args(hint) if each is not type(None)]
        if len(given) == 1:
            hint = given[0]
    if hint is uuid.UUID:
        return Kind.ID
    if hint is datetime:
        return Kind.TIMESTAMP
    if hint is date:
        return Kind.DATE
    if get_origin(hint) is tuple:
        return Kind.LIST
    if hint in (str, int, bool) or get_origin(hint) is Literal:
        return Kind.AS_IS
    raise TypeError(f"no JSON kind for {hint!r}")


def shape_of(
    read_model: type,
    table: Table,
    *,
    hidden: Collection[str] = (),
    sources: Mapping[str, Source] | None = None,
) -> Shape:
    """The shape of a record: ``read_model``'s attributes in their order but ``hidden``, each of
    the kind its type says, its value of ``table``'s column of its name unless ``sources`` give
    another."""
    hints = get_type_hints(read_model)
    given = sources or {}
    return Shape(
        table,
        tuple(
            ShapeField(each.name, _kind(hints[each.name]), given.get(each.name))
            for each in dataclasses.fields(read_model)
            if each.name not in hidden
        ),
    )
