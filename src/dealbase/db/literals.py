"""Values written into SQL text, for the statements a unit of work sends as one simple-protocol
script (no parameters travel apart there): into the statement's own text, or as the arguments
of ``EXECUTE`` of the statement prepared on the server.

psycopg's ``mogrify`` does this for any value, through its adapters, and costs about 60 µs for
a statement of one text value (most of it building a client cursor and converting the query);
the statements of a write route hold only a few kinds of value, which this writes in a few
µs. Strings are quoted by libpq (``PQescapeLiteral``, the connection's encoding and
``standard_conforming_strings`` taken into account), never here; every other kind is written
from its own canonical form, and a list as an array literal (its elements in double quotes,
then the whole quoted by libpq). A value of another kind answers None, and the caller falls back to
``mogrify``.

A statement prepared on the connection can also take its values apart, in text format, through
the extended protocol (``parameters``): each value written as the text its type's input function
reads, the same text the ``EXECUTE`` argument's literal gives it, so either way runs the statement
alike.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

import psycopg

Escape = Callable[[bytes], bytes]

# SQLAlchemy's psycopg dialect writes parameters as %(name)s and a literal % as %%.
_MARK = re.compile(r"%\(([^)]+)\)s|%%")


@lru_cache(maxsize=4096)
def _template(sql: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The text around each parameter (one more piece than names), and the names in order."""
    pieces: list[str] = []
    names: list[str] = []
    current: list[str] = []
    last = 0
    for mark in _MARK.finditer(sql):
        current.append(sql[last : mark.start()])
        name = mark.group(1)
        if name is None:
            current.append("%")
        else:
            pieces.append("".join(current))
            current = []
            names.append(name)
        last = mark.end()
    current.append(sql[last:])
    pieces.append("".join(current))
    return tuple(pieces), tuple(names)


def literal(value: object, escape: Escape) -> str | None:
    """``value`` as an SQL literal, or None for a kind written only by ``mogrify``."""
    kind = type(value)
    if value is None:
        return "NULL"
    if kind is str:
        text: str = value  # type: ignore[assignment]
        if "\x00" in text:  # libpq would stop at it: refuse, as psycopg's own dumper does
            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        return escape(text.encode()).decode()
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        # A space before a minus: "x -%(n)s" must not become the comment "x --1".
        return f" {value}" if value < 0 else str(value)  # type: ignore[operator]
    if kind is uuid.UUID:
        # Its 32 hex digits, which PostgreSQL reads as the hyphenated form: ``UUID.hex`` costs
        # a quarter of ``str(UUID)`` (about 2,000 instructions against 7,500).
        return f"'{value.hex}'::uuid"  # type: ignore[attr-defined]
    if kind is datetime:
        cast = "timestamptz" if value.tzinfo is not None else "timestamp"  # type: ignore[attr-defined]
        return f"'{value.isoformat()}'::{cast}"  # type: ignore[attr-defined]
    if kind is date:
        return f"'{value.isoformat()}'::date"  # type: ignore[attr-defined]
    if kind is psycopg.Binary:  # what SQLAlchemy's LargeBinary hands the driver
        value, kind = value.obj, type(value.obj)  # type: ignore[attr-defined]
    if kind is bytes:
        # Hex digits only inside the quotes, whatever standard_conforming_strings says.
        return f"decode('{value.hex()}', 'hex')"  # type: ignore[attr-defined]
    if kind is Decimal and value.is_finite():  # type: ignore[attr-defined]
        return f"'{value}'::numeric"
    if kind is list:
        elements = _array_elements(value)  # type: ignore[arg-type]
        return None if elements is None else escape(elements.encode()).decode()
    return None


def _array_elements(values: list[object]) -> str | None:
    """A one-dimensional array literal (``{"a",NULL,"b"}``), untyped: the statements that take
    arrays cast them (``unnest(CAST(%(ids)s::UUID[] AS UUID[]))``), as PostgreSQL does an
    untyped literal from its context. None for an element of another kind."""
    written = []
    for value in values:
        kind = type(value)
        if value is None:
            written.append("NULL")
        elif kind is str:
            text: str = value  # type: ignore[assignment]
            if "\x00" in text:
                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            written.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif kind is bool:
            written.append("t" if value else "f")
        elif kind in (int, uuid.UUID) or (kind is Decimal and value.is_finite()):  # type: ignore[attr-defined]
            written.append(str(value))
        elif kind in (date, datetime):
            written.append(f'"{value.isoformat()}"')  # type: ignore[attr-defined]
        else:
            return None
    return "{" + ",".join(written) + "}"


def inline(sql: str, values: Mapping[str, Any], escape: Escape) -> str | None:
    """``sql`` with ``values`` written in, or None when one of them is of a kind ``literal``
    does not write."""
    pieces, names = _template(sql)
    parts = [pieces[0]]
    for name, piece in zip(names, pieces[1:], strict=True):
        written = literal(values[name], escape)
        if written is None:
            return None
        parts.append(written)
        parts.append(piece)
    return "".join(parts)


@lru_cache(maxsize=4096)
def prepared(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` as the body of a ``PREPARE``: each distinct parameter a ``$n`` in order of first
    appearance; and those names in that order, the arguments its ``EXECUTE`` takes."""
    pieces, names = _template(sql)
    numbers: dict[str, int] = {}
    parts = [pieces[0]]
    for name, piece in zip(names, pieces[1:], strict=True):
        parts.append(f"${numbers.setdefault(name, len(numbers) + 1)}")
        parts.append(piece)
    return "".join(parts), tuple(numbers)


def execute_call(name: str, sql: str, values: Mapping[str, Any], escape: Escape) -> str | None:
    """``EXECUTE name(...)`` of ``sql`` prepared as ``name``, with ``values`` written in; None
    when one of them is of a kind ``literal`` does not write."""
    written = []
    for argument in prepared(sql)[1]:
        given = values[argument]
        # Most of a record's optional fields are null: written without a call (a customer's
        # create has about twenty).
        value = "NULL" if given is None else literal(given, escape)
        if value is None:
            return None
        written.append(value)
    return f"EXECUTE {name}({', '.join(written)})" if written else f"EXECUTE {name}"


@lru_cache(maxsize=4096)
def _cast_to_uuid(sql: str) -> tuple[bool, ...]:
    """For each argument of ``prepared(sql)``, whether the statement casts it to ``UUID`` where
    it first appears (SQLAlchemy writes ``%(id)s::UUID`` for a UUID column): PostgreSQL then
    reads it as a UUID, and its 32 hex digits are enough."""
    pieces, names = _template(sql)
    cast: dict[str, bool] = {}
    for name, after in zip(names, pieces[1:], strict=True):
        cast.setdefault(name, after.startswith("::UUID"))
    return tuple(cast[name] for name in prepared(sql)[1])


def _parameter(value: object) -> bytes | None:
    """``value`` (not None) as a text-format parameter, or None for a kind written only as a
    literal: a timestamp (a literal's time zone is converted to a parameter's type, a text
    parameter's is read as written), bytes, a decimal (``numeric::text`` may not write it as
    ``str`` does)."""
    kind = type(value)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        if "\x00" in text:
            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        return text.encode()
    if kind is bool:
        return b"true" if value else b"false"
    if kind is int:
        return str(value).encode()
    if kind is uuid.UUID:
        # Hyphenated, as ``uuid::text`` writes it: what a literal's ``::uuid`` gives a text
        # parameter.
        return str(value).encode()
    if kind is date:
        day: date = value  # type: ignore[assignment]
        return day.isoformat().encode()
    if kind is list:
        elements = _array_elements(value)  # type: ignore[arg-type]
        return None if elements is None else elements.encode()
    return None


def parameters(sql: str, values: Mapping[str, Any]) -> list[bytes | None] | None:
    """The values of ``sql`` prepared (``prepared``), in its parameters' order, as text-format
    parameters; None when one of them is of a kind written only as a literal."""
    written: list[bytes | None] = []
    for argument, as_uuid in zip(prepared(sql)[1], _cast_to_uuid(sql), strict=True):
        given = values[argument]
        if given is None:
            written.append(None)
            continue
        if as_uuid and type(given) is uuid.UUID:
            # ``UUID.hex`` costs a third of ``str(UUID)``.
            written.append(given.hex.encode())
            continue
        value = _parameter(given)
        if value is None:
            return None
        written.append(value)
    return written
