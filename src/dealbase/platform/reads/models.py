"""What to read, as a tree: a page of a list or one row, each object with the entries it shows.

Each entry is named by its key in the answer, which comes from the request: keys travel as
bound values, never as SQL text, unless they are the schema's own names (``SchemaKey``). The
tree holds no other value of a request (a page's filters, cursor and size, a nested list's
length are given when it runs), so one tree serves every request that reads the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Form(Enum):
    """How a column's value is written in the answer."""

    AS_IS = "as_is"  # text, numbers and booleans as JSON has them
    TEXT = "text"  # an id as its text
    TIMESTAMP = "timestamp"  # ISO 8601 in the session's offset, as Python's isoformat writes it
    DATE = "date"  # YYYY-MM-DD
    NAME = "name"  # a kind (a step's, an activity's) as its upper-case name


@dataclass(frozen=True, slots=True)
class Attribute:
    """A value of the row: a column, or one the resource derives (``readable``)."""

    name: str
    form: Form


@dataclass(frozen=True, slots=True)
class Constant:
    """A value the schema fixes, such as a type's name."""

    value: str


@dataclass(frozen=True, slots=True)
class Related:
    """The row a relation names (a deal's step), or null."""

    relation: str
    fields: Fields


@dataclass(frozen=True, slots=True)
class RelatedList:
    """The rows of a to-many relation (a deal's customers) in its order; ``limit`` names the
    given value of its length, or is None for every row."""

    relation: str
    fields: Fields
    limit: str | None


@dataclass(frozen=True, slots=True)
class CustomFields:
    """A record's custom fields (a customer's, a deal's, an activity's): the object of its
    tenant's live fields, each as the record's JSON shows it under ``custom_fields``, or null
    for a tenant without fields of the record. The statement is then made for the caller's
    tenant's fields (``reads.service``)."""


class SchemaKey(str):
    """A key that is one of the schema's own names (a field's, ``__typename``), not an alias of
    the request's: an object whose keys all are may be written with them as column labels
    (``row_to_json``), which costs PostgreSQL less than bound keys."""

    __slots__ = ()


Entry = Attribute | Constant | Related | RelatedList | CustomFields
# (key in the answer, entry), in the answer's order.
Fields = tuple[tuple[str, Entry], ...]


@dataclass(frozen=True, slots=True)
class TotalCount:
    """How many rows match the list's filters, over every page."""


@dataclass(frozen=True, slots=True)
class HasNextPage:
    pass


@dataclass(frozen=True, slots=True)
class EndCursor:
    """The cursor of the page's last row, or null for an empty page."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page after this row starts."""


@dataclass(frozen=True, slots=True)
class Node:
    fields: Fields


@dataclass(frozen=True, slots=True)
class PageInfo:
    fields: tuple[tuple[str, HasNextPage | EndCursor | Constant], ...]


@dataclass(frozen=True, slots=True)
class Edges:
    fields: tuple[tuple[str, Cursor | Node | Constant], ...]


@dataclass(frozen=True, slots=True)
class PageRead:
    """A page of a list (``customers``, ``deals``, ``activities``) as a connection."""

    resource: str
    fields: tuple[tuple[str, TotalCount | PageInfo | Edges | Constant], ...]


@dataclass(frozen=True, slots=True)
class OneRead:
    """One row of a resource (``customer``, ``deal``, ``activity``) by id."""

    resource: str
    fields: Fields
