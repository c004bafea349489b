"""SQLAlchemy Core statements rendered for one tenant's schema, through SQLAlchemy's public
compile API.

SQLAlchemy Core stays the language of every query; only the execution is ours
(``transactions.TenantConnection``, on psycopg). Its ``Connection.execute`` spends most of a
short transaction's CPU on machinery a unit of work does not use (execution contexts, events,
result metadata, pool proxies; docs/architecture.md, "Decisions and their reasons"). A
statement is compiled with the tenant placeholder schema left as a token, and the tenant's
schema is written into the text in its place, so the routing travels inside the statement and
no ``search_path`` round trip is needed. A statement a module builds once (``built_once``) is
compiled once, and its text kept per schema (unless an IN list makes its text per call); any
other is compiled each time it runs.

Statements are compiled with PostgreSQL's own placeholders (``$1``, SQLAlchemy's
``numeric_dollar`` paramstyle) and their values given as a sequence in that order, for
psycopg's raw cursors (``RawCursor``): psycopg then sends the text as it is, given encoded
(a kept statement's bytes, whose hash psycopg's prepared-statement lookup computes once). Its
other cursors parse a statement's text for ``%(name)s`` placeholders on every run, and keep
the parsed form only for statements of up to 4096 characters, which a write's CTEs and a
compiled read pass once the tenant's schema is written in.
"""

from __future__ import annotations

import operator
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import Function

from dealbase.tenancy.scope import TENANT_SCHEMA_PLACEHOLDER

# One row as a mapping of column name to value.
Record = dict[str, Any]
StatementListener = Callable[[str], None]
T = TypeVar("T")
Processor = Callable[[Any], Any]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def dataclass_of_row(cls: type[T], row: Mapping[Any, Any], **converted: object) -> T:
    """The dataclass ``cls`` of the row's values under its fields' names, but the ``converted``
    fields (a value to convert, or one the row names otherwise)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        dataclass_type: Any = cls  # a dataclass, which the unbounded T cannot say
        names = _FIELD_NAMES[cls] = tuple(field.name for field in fields(dataclass_type))
    make: Callable[..., T] = cls
    return make(**{name: row[name] for name in names if name not in converted}, **converted)


# How SQLAlchemy's compiler marks a schema to be translated at execution time.
_TENANT_SCHEMA_TOKEN = f"__[SCHEMA_{TENANT_SCHEMA_PLACEHOLDER}]"
_TRANSLATE_LATER = {TENANT_SCHEMA_PLACEHOLDER: TENANT_SCHEMA_PLACEHOLDER}
# The compiler marks every schema so; any but the tenant's (the control schema) stays itself.
_OTHER_SCHEMA_TOKEN = re.compile(r"__\[SCHEMA_([^\]]+)\]")


def _in_schema(sql: str, schema: str) -> str:
    """The compiled ``sql`` with its tables in ``schema`` (a tenant's), the control schema's in
    their own."""
    sql = sql.replace(_TENANT_SCHEMA_TOKEN, schema)
    if "__[SCHEMA_" in sql:  # a tenant's one statement in control: waking the worker
        sql = _OTHER_SCHEMA_TOKEN.sub(r"\1", sql)
    return sql


def tenant_function(name: str, *arguments: Any, type_: Any = None) -> Function[Any]:
    """A call of the function ``name`` of the tenant's schema. Its schema is written as the
    tables' is: the compiler quotes the token, and a tenant schema's name, lower-case, is the
    same identifier quoted."""
    return Function(name, *arguments, packagenames=(_TENANT_SCHEMA_TOKEN,), type_=type_)


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement compiled for the dialect, with what its values and rows need."""

    compiled: SQLCompiler
    # Each bound parameter's converter to what psycopg takes (JSON, enums), by name.
    bind_processors: Mapping[str, Processor]
    # Column index and converter, for the types whose values psycopg does not return as the
    # table declares them (arrays).
    result_processors: tuple[tuple[int, Processor], ...]
    expands: bool  # ``IN`` lists and other values rendered into the text per call
    order: tuple[str, ...]  # the parameters' names, in the order of their placeholders


K = TypeVar("K")
V = TypeVar("V")


class Kept(Generic[K, V]):
    """What is made once per key and kept, at most ``most`` (past that it starts again): the
    statements a module builds per record's table, which a tenant's custom fields make one of
    its own (a table with their columns)."""

    def __init__(self, most: int = 512) -> None:
        self._kept: dict[K, V] = {}
        self._most = most

    def get(self, key: K, make: Callable[[], V]) -> V:
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= self._most:
                self._kept.clear()
            found = self._kept[key] = make()
        return found


# Statements a module builds once and runs for every request (``built_once``).
_BUILT_ONCE: weakref.WeakSet[ClauseElement] = weakref.WeakSet()
S = TypeVar("S", bound=ClauseElement)


def built_once(statement: S) -> S:
    """Marks ``statement`` as built once and run many times (a module's constant, or one kept
    by an ``lru_cache``): it is then compiled once, found again by identity, and its SQL text
    kept per tenant schema, which is most of the CPU of rendering a statement of a write route.
    A statement not so marked is compiled every time it runs."""
    _BUILT_ONCE.add(statement)
    return statement


@dataclass(frozen=True, slots=True)
class _Slots:
    """How a built-once statement's placeholders take their values, in the text's order: read
    by one C call (``in_order``) from the given values and those the statement holds itself
    (``fixed``, its literals), then the given ones that need it converted (``converted``, by
    position), rather than by a Python loop over every placeholder of a wide insert."""

    fixed: dict[str, Any]
    in_order: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    converted: tuple[tuple[int, Processor], ...]

    def values(self, given: Mapping[str, Any]) -> list[Any]:
        row = list(self.in_order({**given, **self.fixed} if self.fixed else given))
        for index, processor in self.converted:
            row[index] = processor(row[index])
        return row


@dataclass(slots=True)
class _BuiltOnce:
    """A ``built_once`` statement compiled for one set of parameter names."""

    statement: ClauseElement
    entry: Compiled
    # None when a render needs more than the given values (an IN list to expand, a computed
    # default): only the compile is kept.
    slots: _Slots | None
    sql_by_schema: dict[str, bytes]


# Schemas whose SQL a built-once statement keeps; past that it starts again (a busy tenant's
# text is back after one render).
_SCHEMAS_KEPT = 256

# The SQL text (encoded: kept so, psycopg neither encodes nor hashes it again), one sequence
# of values per parameter set, and the compiled statement.
Rendered = tuple[bytes, list[list[Any]], Compiled]


class StatementCache:
    """The compiled ``built_once`` statements of one dialect, by identity and the names of the
    parameters given; bounded (a PATCH's UPDATE has a shape per set of fields it names)."""

    def __init__(self, size: int = 1000) -> None:
        # PostgreSQL's placeholders (the module's docstring).
        self._dialect: Dialect = psycopg_dialect.dialect(  # type: ignore[no-untyped-call]
            paramstyle="numeric_dollar"
        )
        self._size = size
        self._built_once: dict[tuple[int, tuple[str, ...]], _BuiltOnce] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._built_once)

    def render(
        self, statement: ClauseElement, parameters: Sequence[Mapping[str, Any]], schema: str
    ) -> Rendered:
        """The SQL text for ``schema`` and one sequence of values per parameter set (at least
        one), in the order of the text's placeholders."""
        if statement in _BUILT_ONCE:
            names = tuple(parameters[0]) if parameters else ()
            known = self._built_once.get((id(statement), names))
            if known is None or known.statement is not statement:
                sql, values, order, entry = self._render(statement, parameters, schema)
                self._remember(statement, names, parameters, values, entry, sql, schema)
            elif known.slots is None:
                sql, values, order, entry = self._render(statement, parameters, schema, known.entry)
            else:
                return self._render_known(known, parameters, schema)
        else:
            sql, values, order, entry = self._render(statement, parameters, schema)
        return sql, [[given[name] for name in order] for given in values], entry

    def _render_known(
        self, known: _BuiltOnce, parameters: Sequence[Mapping[str, Any]], schema: str
    ) -> Rendered:
        slots = known.slots
        assert slots is not None
        values = [slots.values(given) for given in parameters or ({},)]
        sql = known.sql_by_schema.get(schema)
        if sql is None:
            if len(known.sql_by_schema) >= _SCHEMAS_KEPT:
                known.sql_by_schema.clear()
            sql = known.sql_by_schema[schema] = _in_schema(
                known.entry.compiled.string, schema
            ).encode()
        return sql, values, known.entry

    def _remember(
        self,
        statement: ClauseElement,
        names: tuple[str, ...],
        parameters: Sequence[Mapping[str, Any]],
        values: Sequence[Mapping[str, Any]],
        entry: Compiled,
        sql: bytes,
        schema: str,
    ) -> None:
        """Keeps ``statement``'s compiled form, and what rendering it again needs when that is
        only the given values and the statement's own fixed ones (no IN list, no escaped name,
        no computed default)."""
        slots = _slots(entry, parameters, values)
        known = _BuiltOnce(statement, entry, slots, {} if slots is None else {schema: sql})
        with self._lock:
            if len(self._built_once) >= self._size:
                self._built_once.clear()
            self._built_once[(id(statement), names)] = known

    def _render(
        self,
        statement: ClauseElement,
        parameters: Sequence[Mapping[str, Any]],
        schema: str,
        entry: Compiled | None = None,
    ) -> tuple[bytes, Sequence[Mapping[str, Any]], tuple[str, ...], Compiled]:
        """The SQL text for ``schema``, the values by name (converted), the names in the order
        of the text's placeholders, and the compiled statement (``entry``, or compiled now)."""
        if entry is None:
            entry = self._compile(statement, sorted(parameters[0]) if parameters else [])
        compiled = entry.compiled
        sql, order = compiled.string, entry.order
        processors = entry.bind_processors
        if entry.expands:
            if len(parameters) > 1:
                raise ValueError(
                    "expanding (IN) parameters cannot be used with many parameter sets"
                )
            expanded = compiled.construct_expanded_state(
                parameters[0] if parameters else None, escape_names=False
            )
            sql, order = expanded.statement, tuple(expanded.positiontup or ())
            values: Sequence[Mapping[str, Any]] = [expanded.parameters]
            processors = {**processors, **expanded.processors}
        else:
            values = [
                compiled.construct_params(given, escape_names=False)
                for given in (parameters or [{}])
            ]
        if processors:
            values = [
                {
                    name: processors[name](value) if name in processors else value
                    for name, value in given.items()
                }
                for given in values
            ]
        return _in_schema(sql, schema).encode(), values, order, entry

    def _compile(self, statement: ClauseElement, column_keys: list[str]) -> Compiled:
        dialect = self._dialect
        compiled = statement.compile(
            dialect=dialect, column_keys=column_keys, schema_translate_map=_TRANSLATE_LATER
        )
        assert isinstance(compiled, SQLCompiler)
        bind_processors = {
            name: processor
            for name, bind in compiled.binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect))
        }
        result_processors = tuple(
            (index, processor)
            for index, column in enumerate(getattr(statement, "exported_columns", ()))
            if (processor := column.type.dialect_impl(dialect).result_processor(dialect, None))
        )
        return Compiled(
            compiled,
            bind_processors,
            result_processors,
            bool(compiled.literal_execute_params or compiled.post_compile_params),
            tuple(compiled.positiontup or ()),
        )


def _slots(
    entry: Compiled,
    parameters: Sequence[Mapping[str, Any]],
    values: Sequence[Mapping[str, Any]],
) -> _Slots | None:
    """``_BuiltOnce.slots`` of a statement rendered once with ``parameters`` into ``values``."""
    if entry.expands or any(bind.callable is not None for bind in entry.compiled.binds.values()):
        return None
    first = parameters[0] if parameters else {}
    fixed = {name: value for name, value in values[0].items() if name not in first}
    processors = entry.bind_processors
    if any(name in processors for name in fixed):
        return None
    order = entry.order
    converted = tuple(
        (index, processors[name]) for index, name in enumerate(order) if name in processors
    )
    return _Slots(fixed, _reader(order), converted)


def _reader(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """The values of ``names``, in order, as a tuple (``itemgetter`` gives one name's alone)."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        (name,) = names
        return lambda given: (given[name],)
    return lambda given: ()


class Rows:
    """Every row a statement returned, read at once (a unit of work reads all it asks for)."""

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self._columns = columns
        self._rows = rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)

    def all(self) -> list[tuple[Any, ...]]:
        return self._rows

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def one(self) -> tuple[Any, ...]:
        return _one(self._rows)

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return _one(self._rows)[0]

    def scalar_one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise MultipleResultsFound("more than one row where at most one was expected")
        return self.scalar()

    def mappings(self) -> Records:
        columns = self._columns
        return Records([dict(zip(columns, row, strict=True)) for row in self._rows])


class Records:
    """The same rows as mappings of column name to value."""

    __slots__ = ("_records",)

    def __init__(self, records: list[Record]) -> None:
        self._records = records

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records)

    def all(self) -> list[Record]:
        return self._records

    def first(self) -> Record | None:
        return self._records[0] if self._records else None

    def one(self) -> Record:
        return _one(self._records)

    def one_or_none(self) -> Record | None:
        if len(self._records) > 1:
            raise MultipleResultsFound("more than one row where at most one was expected")
        return self.first()


def _one(rows: list[T]) -> T:
    if not rows:
        raise NoResultFound("no row where exactly one was expected")
    if len(rows) > 1:
        raise MultipleResultsFound("more than one row where exactly one was expected")
    return rows[0]
