"""SQLAlchemy Core statements run on a plain psycopg connection, each statement shape compiled once.

SQLAlchemy Core stays the language of every query; only the execution is ours. Its
``Connection.execute`` spends most of a short transaction's CPU on machinery a unit of work does
not use (execution contexts, events, result metadata, pool proxies): a one-INSERT transaction
took 0.64 ms of CPU through it and 0.27 ms as the same SQL through psycopg (docs/architecture.md,
"Decisions and their reasons"). Here a statement is compiled once per shape, keyed by
SQLAlchemy's own cache key (the structure, not the values); the tenant's schema is written into
the compiled text in place of the ``tenant`` placeholder, so the routing travels inside the first
statement and no ``search_path`` round trip is needed. A statement a connection has run a few
times is prepared on its server (``ServerPrepared``; unless prepared statements are turned off,
for pgbouncer).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import structlog
from psycopg.abc import PQGen
from psycopg.adapt import Transformer
from psycopg.generators import execute as execute_generator
from psycopg.generators import fetch, fetch_many
from psycopg.generators import send as send_generator
from psycopg.pq import DiagnosticField, ExecStatus
from psycopg.pq.abc import PGconn, PGresult
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_

from dealbase.db.faults import ErrorMeaning, meant
from dealbase.db.literals import execute_call, inline, parameters, prepared
from dealbase.tenancy.scope import TENANT_SCHEMA_PLACEHOLDER

log = structlog.get_logger(__name__)

_TUPLES_OK = ExecStatus.TUPLES_OK
_COMMAND_OK = ExecStatus.COMMAND_OK
_EMPTY_QUERY = ExecStatus.EMPTY_QUERY
_FATAL_ERROR = ExecStatus.FATAL_ERROR
_PIPELINE_SYNC = ExecStatus.PIPELINE_SYNC

# One row as a mapping of column name to value.
Record = dict[str, Any]
StatementListener = Callable[[str], None]
T = TypeVar("T")

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


@dataclass(frozen=True, slots=True)
class _Compiled:
    compiled: SQLCompiler
    # Column index and converter, for the few types whose values psycopg does not return as the
    # table declares them (none of the tenant tables today; kept so a new type cannot slip by).
    result_processors: tuple[tuple[int, Callable[[Any], Any]], ...]
    expands: bool  # ``IN`` lists and other values rendered into the text per call


# Statements a module builds once and runs for every request (``built_once``).
_BUILT_ONCE: weakref.WeakSet[ClauseElement] = weakref.WeakSet()
S = TypeVar("S", bound=ClauseElement)


def built_once(statement: S) -> S:
    """Marks ``statement`` as built once and run many times (a module's constant, or one kept
    by an ``lru_cache``): the cache then finds it by identity rather than by hashing its
    structure, and keeps its SQL text per tenant schema and what its values need, which is
    most of the CPU of rendering a statement of a write route."""
    _BUILT_ONCE.add(statement)
    return statement


@dataclass(slots=True)
class _BuiltOnce:
    """A ``built_once`` statement rendered for one set of parameter names."""

    statement: ClauseElement
    entry: _Compiled
    given: tuple[str, ...]  # the names whose values the caller gives, as it gave them
    fixed: dict[str, Any]  # the values the statement holds itself (its literals)
    processors: Mapping[str, Callable[[Any], Any]]
    sql_by_schema: dict[str, str]


# Schemas whose SQL a built-once statement keeps; past that it starts again (a busy tenant's
# text is back after one render).
_SCHEMAS_KEPT = 256


class StatementCache:
    """Compiled statements of one dialect, by shape; bounded (an UPDATE's shape depends on the
    fields a PATCH names, so shapes are many but not unlimited), least recently used first out."""

    def __init__(self, dialect: Dialect, size: int = 1000) -> None:
        self._dialect = dialect
        self._size = size
        self._entries: OrderedDict[Any, _Compiled] = OrderedDict()
        self._built_once: dict[tuple[int, tuple[str, ...]], _BuiltOnce] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def render(
        self, statement: ClauseElement, parameters: Sequence[Mapping[str, Any]], schema: str
    ) -> tuple[str, list[MutableMapping[str, Any]], _Compiled]:
        """The SQL text for ``schema`` and one dict of values per parameter set (at least one)."""
        if statement in _BUILT_ONCE:
            names = tuple(parameters[0]) if parameters else ()
            known = self._built_once.get((id(statement), names))
            if known is not None and known.statement is statement:
                return self._render_known(known, parameters, schema)
            sql, values, entry = self._render(statement, parameters, schema)
            self._remember(statement, names, parameters, values, entry, sql, schema)
            return sql, values, entry
        return self._render(statement, parameters, schema)

    def _render_known(
        self, known: _BuiltOnce, parameters: Sequence[Mapping[str, Any]], schema: str
    ) -> tuple[str, list[MutableMapping[str, Any]], _Compiled]:
        processors = known.processors
        values: list[MutableMapping[str, Any]] = []
        for given in parameters or ({},):
            value = dict(known.fixed)
            for name in known.given:
                value[name] = processors[name](given[name]) if name in processors else given[name]
            values.append(value)
        sql = known.sql_by_schema.get(schema)
        if sql is None:
            if len(known.sql_by_schema) >= _SCHEMAS_KEPT:
                known.sql_by_schema.clear()
            sql = _in_schema(known.entry.compiled.string, schema)
            known.sql_by_schema[schema] = sql
        return sql, values, known.entry

    def _remember(
        self,
        statement: ClauseElement,
        names: tuple[str, ...],
        parameters: Sequence[Mapping[str, Any]],
        values: list[MutableMapping[str, Any]],
        entry: _Compiled,
        sql: str,
        schema: str,
    ) -> None:
        """Keeps what rendering ``statement`` again needs, when that is only the given values
        and the statement's own fixed ones (no IN list, no escaped name, no computed default)."""
        compiled = entry.compiled
        if entry.expands or compiled.escaped_bind_names:
            return
        if any(bind.callable is not None for bind in compiled.binds.values()):
            return
        given = tuple(name for name in names if name in values[0])
        first = parameters[0] if parameters else {}
        fixed = {name: value for name, value in values[0].items() if name not in first}
        processors: Mapping[str, Callable[[Any], Any]] = compiled._bind_processors  # type: ignore[assignment]
        if any(name in processors for name in fixed):
            return
        known = _BuiltOnce(statement, entry, given, fixed, processors, {schema: sql})
        with self._lock:
            if len(self._built_once) >= self._size:
                self._built_once.clear()
            self._built_once[(id(statement), names)] = known

    def _render(
        self, statement: ClauseElement, parameters: Sequence[Mapping[str, Any]], schema: str
    ) -> tuple[str, list[MutableMapping[str, Any]], _Compiled]:
        column_keys = sorted(parameters[0]) if parameters else []
        cache_key = statement._generate_cache_key()
        if cache_key is None:  # a construct SQLAlchemy cannot cache: compile it every time
            entry = self._compile(statement, column_keys, None)
            extracted, collected = None, None
        else:
            key = (cache_key.key, tuple(column_keys))
            with self._lock:
                found = self._entries.get(key)
                if found is not None:
                    self._entries.move_to_end(key)
            if found is None:
                found = self._compile(statement, column_keys, cache_key)
                with self._lock:
                    self._entries[key] = found
                    if len(self._entries) > self._size:
                        self._entries.popitem(last=False)
            entry = found
            extracted, collected = cache_key.bindparams, cache_key.params
        compiled = entry.compiled
        # What SQLAlchemy's DefaultExecutionContext._init_compiled does with the same objects.
        values = [
            compiled.construct_params(
                given,
                extracted_parameters=extracted,
                escape_names=False,
                _collected_params=collected,
            )
            for given in (parameters or [{}])
        ]
        sql = compiled.string
        processors: Mapping[str, Callable[[Any], Any]] = compiled._bind_processors  # type: ignore[assignment]
        if entry.expands:
            if len(values) > 1:
                raise ValueError(
                    "expanding (IN) parameters cannot be used with many parameter sets"
                )
            expanded = compiled._process_parameters_for_postcompile(values[0])
            sql = expanded.statement
            processors = {**processors, **expanded.processors}
        escaped = compiled.escaped_bind_names
        if processors or escaped:
            values = [
                {
                    escaped.get(name, name): (
                        processors[name](value) if name in processors else value
                    )
                    for name, value in given.items()
                }
                for given in values
            ]
        return _in_schema(sql, schema), values, entry

    def _compile(
        self, statement: ClauseElement, column_keys: list[str], cache_key: Any
    ) -> _Compiled:
        compiled = statement.compile(
            dialect=self._dialect,
            column_keys=column_keys,
            schema_translate_map=_TRANSLATE_LATER,
            cache_key=cache_key,
        )
        assert isinstance(compiled, SQLCompiler)
        result_processors = tuple(
            (index, processor)
            for index, column in enumerate(compiled._result_columns)
            if (processor := column.type._cached_result_processor(self._dialect, None))
        )
        return _Compiled(
            compiled,
            result_processors,
            bool(compiled.literal_execute_params or compiled.post_compile_params),
        )


def switch_to(role: str) -> tuple[str, str]:
    """The statements that open a unit of work's transaction as ``role`` (``tenant_role``).

    ``SET LOCAL`` ends with the transaction, commit or rollback, so the pooled connection (or a
    pgbouncer server connection) goes back to its next user as the login role.
    """
    return "BEGIN", f'SET LOCAL ROLE "{role}"'


# The same switch as one statement taking the role (``tenant_role``) as its parameter, for a
# unit of work sent as a pipeline of prepared statements (``TenantConnection._pipelined``):
# ``SET ROLE`` is the ``role`` setting, so ``set_config`` of it local to the transaction checks
# the login role's membership and ends with the transaction as ``SET LOCAL ROLE`` does.
SWITCH_TO_ROLE = b"SELECT set_config('role', $1, true)"


_SERVER_NAMES = itertools.count(1)
# What PREPARE takes (not SAVEPOINT and the like, which units of work also run).
_PREPARABLE = re.compile(r"\s*(?:SELECT|INSERT|UPDATE|DELETE|WITH|VALUES)\b", re.IGNORECASE)
# The savepoint around a PREPARE, which PostgreSQL may refuse (a parameter whose type it
# cannot tell) without the unit of work's transaction failing with it.
_PREPARING = "dealbase_preparing"
# The class of SQLSTATE in which PostgreSQL refuses a PREPARE it cannot type or resolve.
_SYNTAX_OR_ACCESS_RULE = "42"


@dataclass(slots=True)
class _OnConnection:
    prepared: OrderedDict[str, str]  # SQL text to its name, the least recently run first
    runs: dict[str, int]  # runs of each SQL text not prepared yet


# The name ``SWITCH_TO_ROLE`` is prepared under, once per connection.
_ROLE_SWITCH_NAME = b"dealbase_role"
_DUPLICATE_PREPARED = b"42P05"


class ServerPrepared:
    """The statements each connection has prepared on its server, for the scripts of units of
    work (``TenantConnection``), and how often each other one has run.

    A script goes by the simple protocol, which takes no parameters and prepares nothing:
    PostgreSQL parsed and planned a create's ``INSERT`` on every request, 60 % of that
    statement's time in ``pg_stat_statements``. Once a statement has run ``after`` times on a
    connection it is prepared there (``PREPARE``, as the tenant's role, in a savepoint of the
    unit of work's transaction: one round trip more, once), and scripts run it as ``EXECUTE
    name(values)``, planned once for all its runs. A prepared statement outlives the
    transaction, committed or rolled back, and ends with the session. A connection keeps at
    most ``per_connection``, the least recently run deallocated first, so a backend's memory
    stays bounded however many tenants' schemas it works in (each has statements of its own).

    psycopg's own preparing is off on these connections: psycopg deallocates every statement
    of its session after any ``ROLLBACK`` once it has prepared one itself, these included.
    """

    def __init__(self, after: int, per_connection: int = 100) -> None:
        self._after = after
        self._per_connection = per_connection
        self._connections: weakref.WeakKeyDictionary[object, _OnConnection] = (
            weakref.WeakKeyDictionary()
        )
        # Statements PostgreSQL would not prepare, whatever the connection.
        self._refused: set[str] = set()
        # The connections with ``SWITCH_TO_ROLE`` prepared as ``_ROLE_SWITCH_NAME``.
        self._switching: weakref.WeakSet[object] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _on(self, connection: object) -> _OnConnection:
        found = self._connections.get(connection)
        if found is None:
            found = self._connections[connection] = _OnConnection(OrderedDict(), {})
        return found

    def name_or_due(self, connection: object, sql: str) -> tuple[str | None, bool]:
        """``sql``'s prepared name on ``connection``; else whether it is due to be prepared
        (it has now run often enough), counting this run."""
        with self._lock:
            on = self._on(connection)
            name = on.prepared.get(sql)
            if name is not None:
                on.prepared.move_to_end(sql)
                return name, False
            if sql in self._refused or not _PREPARABLE.match(sql):
                return None, False
            if len(on.runs) >= 10 * self._per_connection:
                on.runs.clear()
            runs = on.runs[sql] = on.runs.get(sql, 0) + 1
            return None, runs >= self._after

    def allot(self, connection: object) -> tuple[str, str | None]:
        """A new statement's name, and the prepared statement to deallocate first when the
        connection keeps as many as it may."""
        with self._lock:
            on = self._on(connection)
            oldest = (
                next(iter(on.prepared.values()))
                if len(on.prepared) >= self._per_connection
                else None
            )
            return f"dealbase_{next(_SERVER_NAMES)}", oldest

    def prepared(
        self, connection: object, sql: str, name: str | None, deallocated: str | None
    ) -> None:
        """Records what a PREPARE did: ``sql`` prepared as ``name``, or refused (None); and
        ``deallocated`` gone either way."""
        with self._lock:
            on = self._on(connection)
            if deallocated is not None:
                on.prepared = OrderedDict(
                    (text, each) for text, each in on.prepared.items() if each != deallocated
                )
            on.runs.pop(sql, None)
            if name is not None:
                on.prepared[sql] = name
            else:
                if len(self._refused) >= 1000:
                    self._refused.clear()
                self._refused.add(sql)

    def switches_role(self, connection: object) -> bool:
        """Whether ``connection`` has ``SWITCH_TO_ROLE`` prepared."""
        return connection in self._switching

    def role_switch_prepared(self, connection: object) -> None:
        with self._lock:
            self._switching.add(connection)

    def count(self, connection: object) -> int:
        """How many statements ``connection`` has prepared."""
        with self._lock:
            found = self._connections.get(connection)
            return 0 if found is None else len(found.prepared)


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


@dataclass(frozen=True, slots=True)
class _Call:
    """A statement to send with its values: as the text of a script (``EXECUTE`` of it, when
    prepared on the connection as ``name``, else the statement with its values written in), or
    bound to its parameters in a pipeline (``TenantConnection._pipelined``)."""

    sql: str
    values: Mapping[str, Any]
    name: str | None


class Deferred:
    """A statement that travels with the unit of work's next round trip: the next statement
    that runs, or the COMMIT. ``rows()`` reads its rows once it has gone, and sends it (with
    whatever else waits) if it has not."""

    __slots__ = ("_entry", "_owner", "_rows", "call", "meaning", "number")

    def __init__(
        self,
        call: _Call,
        entry: _Compiled,
        owner: TenantConnection,
        number: int,
        meaning: ErrorMeaning | None = None,
    ) -> None:
        self.call = call
        self.number = number  # its place among the unit of work's deferred statements
        self.meaning = meaning
        self._entry = entry
        self._owner = owner
        self._rows: Rows | None = None

    def rows(self) -> Rows:
        if self._rows is None:
            self._owner.send_deferred()
        assert self._rows is not None, "sent statements have their rows"
        return self._rows


class TenantConnection:
    """A connection in one transaction whose statements land in one tenant's schema.

    On a psycopg ``AsyncConnection`` the platform's synchronous code still calls ``execute``;
    each round trip is awaited underneath on the event loop (SQLAlchemy's greenlet bridge, the
    one its own asyncio extension uses), so it must run inside ``database.run_on_event_loop``.

    A unit of work spends as few round trips as it can: ``begin`` (its ``BEGIN`` and role
    switch) travels with its first statement, and the statements given to ``defer`` travel with
    the next one, or with the ``COMMIT``. Those go as one simple-protocol script, their values
    written into the text (``literals.inline``, else psycopg's ``mogrify``), or as ``EXECUTE``
    of the statement prepared on the connection (``ServerPrepared``), as does any other
    statement once prepared; until then, one keeps its parameters apart. A unit of work that is
    one round trip of prepared statements goes as a pipeline of the extended protocol instead
    (``_pipelined``), when it knows the tenant's ``role``.
    """

    __slots__ = (
        "_begin",
        "_begun",
        "_commit_with_next",
        "_committed",
        "_connection",
        "_deferred",
        "_deferred_total",
        "_listeners",
        "_prepared",
        "_role",
        "_schema_name",
        "_statements",
    )

    def __init__(
        self,
        connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
        schema: str,
        statements: StatementCache,
        listeners: Sequence[StatementListener] = (),
        *,
        begin: Sequence[str] | None = None,
        prepared: ServerPrepared | None = None,
        role: str | None = None,
    ) -> None:
        self._connection = connection
        self._prepared = prepared
        # The role ``begin`` switches to, for a pipeline's ``SWITCH_TO_ROLE``.
        self._role = role
        self._schema_name = schema
        self._statements = statements
        self._listeners = listeners
        # What opens the transaction; None when the caller opened it already.
        self._begin = begin
        self._begun = begin is None
        self._committed = False
        self._commit_with_next = False
        self._deferred: list[Deferred] = []  # not sent yet, in the order given
        self._deferred_total = 0

    @property
    def committed(self) -> bool:
        return self._committed

    def _render(
        self,
        statement: ClauseElement,
        parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    ) -> tuple[str, list[MutableMapping[str, Any]], _Compiled]:
        if parameters is None:
            parameter_sets: Sequence[Mapping[str, Any]] = ()
        elif isinstance(parameters, Mapping):
            parameter_sets = (parameters,)
        else:
            parameter_sets = parameters
        sql, values, entry = self._statements.render(statement, parameter_sets, self._schema_name)
        for listener in self._listeners:
            listener(sql)
        return sql, values, entry

    def execute(
        self,
        statement: ClauseElement,
        parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Rows:
        """Runs ``statement``; a sequence of parameter sets runs it once per set (in one round
        trip), and the rows come back in the order of the sets."""
        sql, values, entry = self._render(statement, parameters)
        if self._committed:
            raise RuntimeError("the unit of work has committed: no statement may follow")
        if self._commit_with_next and len(values) == 1:
            (columns, rows), _ = self._send([self._call(sql, values[0]), "COMMIT"])
            self._committed = True
            return _rows_of(columns, rows, entry)
        if len(values) == 1 and (not self._begun or self._deferred):
            *_, (columns, rows) = self._send([self._call(sql, values[0])])
            return _rows_of(columns, rows, entry)
        calls = self._prepared_calls(sql, values)
        if calls is not None:
            results = self._send(calls)
            columns = results[0][0]
            return _rows_of(columns, [row for _, rows in results for row in rows], entry)
        if not self._begun or self._deferred:
            self._send([])
        connection = self._connection
        if isinstance(connection, psycopg.AsyncConnection):
            columns, rows = await_(_fetch_async(connection.cursor(), sql, values))
        else:
            columns, rows = _fetch(connection.cursor(), sql, values)
        return _rows_of(columns, rows, entry)

    def defer(
        self,
        statement: ClauseElement,
        parameters: Mapping[str, Any],
        *,
        meaning: ErrorMeaning | None = None,
    ) -> Deferred:
        """Runs ``statement`` in the next round trip, before what else goes in it (the next
        statement, or the COMMIT); ``rows()`` after it. An error in it rolls the transaction
        back, as any statement's would. ``meaning`` says what a database error of that round
        trip means to the caller (an external id taken, as a unique violation): the round trip
        raises that instead, from wherever it was sent (``rows()``, the next statement, the
        COMMIT)."""
        sql, values, entry = self._render(statement, parameters)
        deferred = Deferred(self._call(sql, values[0]), entry, self, self._deferred_total, meaning)
        self._deferred_total += 1
        self._deferred.append(deferred)
        return deferred

    @property
    def deferred_count(self) -> int:
        """How many statements were deferred so far (a mark for ``discard_deferred_after``)."""
        return self._deferred_total

    def discard_deferred_after(self, count: int) -> None:
        """Forgets the statements deferred after the first ``count`` that have not gone yet:
        the work that deferred them is being rolled back to a savepoint (which undoes those
        that went)."""
        self._deferred = [each for each in self._deferred if each.number < count]

    def send_deferred(self) -> None:
        """Sends the deferred statements now, in one round trip (with the ``BEGIN`` when
        nothing ran before)."""
        if self._deferred:
            self._send([])

    def commit_with_next(self) -> None:
        """The next statement is the unit of work's last: it goes with the ``COMMIT`` (and the
        ``BEGIN``), in one round trip, and any statement after it is refused. For a read that
        one statement answers."""
        self._commit_with_next = True

    def commit(self) -> None:
        """Sends the deferred statements and the COMMIT, in one round trip (with the ``BEGIN``
        too when nothing ran before; when nothing ran at all, nothing is sent)."""
        if self._begun or self._deferred:
            self._send(["COMMIT"])
        self._committed = True

    def _send(self, statements: Sequence[_Call | str]) -> list[Fetched]:
        """One round trip: the ``BEGIN`` if the transaction has not begun, the deferred
        statements, then ``statements``; the results of ``statements``.

        A round trip that is the whole transaction (nothing sent before it, the ``COMMIT`` at
        its end) goes without its ``BEGIN`` and ``COMMIT``: PostgreSQL runs the statements of one
        simple-protocol query as one transaction of their own (an implicit transaction block,
        where ``SET LOCAL`` holds to its end too), and spares two statements' parse and
        execution (about 4 µs of PostgreSQL's CPU a create, bench/README.md); so does a
        pipeline up to its Sync (``_pipelined``)."""
        opening = [] if self._begun else self._opening()
        deferred, self._deferred = self._deferred, []
        whole = bool(opening) and opening[0] == "BEGIN" and statements[-1:] == ["COMMIT"]
        self._begun = True
        calls = [*(each.call for each in deferred), *statements]
        try:
            if whole:
                inner = calls[:-1]
                ran = self._pipelined(inner)
                if ran is None:
                    ran = self._script([*opening[1:], *map(self._text, inner)])[len(opening) - 1 :]
                results = [*[_NO_ROWS] * len(opening), *ran, _NO_ROWS]
            else:
                results = self._script([*opening, *map(self._text, calls)])
        except psycopg.Error as failed:
            for each in deferred:
                error = None if each.meaning is None else meant(failed, each.meaning)
                if error is not None:
                    raise error from failed
            raise
        sent = results[len(opening) : len(results) - len(statements)]
        for each, (columns, rows) in zip(deferred, sent, strict=True):
            each._rows = _rows_of(columns, rows, each._entry)
        return results[len(results) - len(statements) :]

    def execute_after_commit(self, statement: ClauseElement, parameters: Mapping[str, Any]) -> bool:
        """Runs ``statement`` in a transaction of its own as the tenant's role, once this one
        has committed: ``BEGIN``, the role switch, it and ``COMMIT`` in one round trip.

        What committed stays committed, so a database error here is logged and answered False,
        not raised: the caller's work succeeded, and saying otherwise would invite a retry that
        writes it twice.
        """
        if self._begin is None or not self._committed:
            raise RuntimeError("only a unit of work that committed its transaction runs one more")
        sql, values, _ = self._render(statement, parameters)
        try:
            self._script([*self._opening(), self._inline(sql, values[0]), "COMMIT"])
        except psycopg.Error as failed:
            log.warning(
                "statement_after_commit_failed", schema=self._schema_name, error=str(failed)
            )
            with contextlib.suppress(psycopg.Error):  # a broken connection is the pool's to drop
                if isinstance(self._connection, psycopg.AsyncConnection):
                    await_(self._connection.rollback())
                else:
                    self._connection.rollback()
            return False
        return True

    def _opening(self) -> list[str]:
        assert self._begin is not None
        return list(self._begin)

    def _call(self, sql: str, values: Mapping[str, Any]) -> _Call:
        """``sql`` with ``values``, as a round trip sends it (``_text``, ``_pipelined``)."""
        return _Call(sql, values, self._prepared_name(sql))

    def _text(self, call: _Call | str) -> str:
        """The call as a script writes it: ``EXECUTE`` of it prepared on this connection
        (``ServerPrepared``), else its text with the values written in."""
        if isinstance(call, str):
            return call
        if call.name is not None:
            written = execute_call(call.name, call.sql, call.values, self._escape())
            if written is not None:
                return written
        return self._inline(call.sql, call.values)

    def _prepared_name(self, sql: str) -> str | None:
        """The name of ``sql`` prepared on this connection; prepared first when it is due (the
        deferred statements go before, in their own round trip, to keep their order). None
        when it is not prepared."""
        prepared_on = self._prepared
        if prepared_on is None:
            return None
        name, due = prepared_on.name_or_due(self._connection, sql)
        if name is None and due:
            self.send_deferred()
            name = self._prepare(prepared_on, sql)
        return name

    def _prepared_calls(self, sql: str, values: Sequence[Mapping[str, Any]]) -> list[str] | None:
        """``EXECUTE`` of ``sql`` prepared on this connection, one per set of ``values``
        (``_prepared_name``). None when it is not prepared, or a value is of a kind
        ``literals.literal`` does not write."""
        name = self._prepared_name(sql)
        if name is None:
            return None
        escape = self._escape()
        calls = []
        for each in values:
            call = execute_call(name, sql, each, escape)
            if call is None:
                return None
            calls.append(call)
        return calls

    def _prepare(self, prepared_on: ServerPrepared, sql: str) -> str | None:
        """Prepares ``sql`` in one round trip (with the ``BEGIN`` and the role switch when the
        transaction has not begun: its names resolve as the tenant's role); its name, or None
        when PostgreSQL refuses it, which the savepoint keeps from failing the transaction."""
        connection = self._connection
        name, deallocated = prepared_on.allot(connection)
        script = [] if self._begun else self._opening()
        self._begun = True
        script.append(f"SAVEPOINT {_PREPARING}")
        if deallocated is not None:
            script.append(f"DEALLOCATE {deallocated}")
        script += [f"PREPARE {name} AS {prepared(sql)[0]}", f"RELEASE SAVEPOINT {_PREPARING}"]
        try:
            self._script(script)
        except psycopg.ProgrammingError as refused:
            if not (refused.sqlstate or "").startswith(_SYNTAX_OR_ACCESS_RULE):
                raise
            self._script([f"ROLLBACK TO SAVEPOINT {_PREPARING}", f"RELEASE SAVEPOINT {_PREPARING}"])
            log.info("statement_not_prepared", error=str(refused))
            prepared_on.prepared(connection, sql, None, deallocated)
            return None
        prepared_on.prepared(connection, sql, name, deallocated)
        return name

    def _pipelined(self, calls: list[_Call | str]) -> list[Fetched] | None:
        """The whole unit of work, ``calls``, as one pipeline of the extended protocol: the role
        switch (``roles.SWITCH_TO_ROLE``, prepared with the connection's first) and each call
        bound to its values and executed, then a Sync, which ends the implicit transaction
        they ran in (committed, or rolled back when one failed); their results. None when a
        call is not prepared on the connection or has a value that travels only as a literal
        (``literals.parameters``): the script goes instead.

        Nothing is parsed: a create's ``EXECUTE`` in a script had PostgreSQL parse its
        arguments and evaluate them as expressions (bench/README.md).
        """
        prepared_on, role = self._prepared, self._role
        if prepared_on is None or role is None:
            return None
        bound: list[tuple[bytes, list[bytes | None]]] = []
        for call in calls:
            if isinstance(call, str) or call.name is None:
                return None
            values = parameters(call.sql, call.values)
            if values is None:
                return None
            bound.append((call.name.encode(), values))
        connection = self._connection
        pgconn = connection.pgconn
        switch_prepared = prepared_on.switches_role(connection)
        pgconn.enter_pipeline_mode()
        try:
            if not switch_prepared:
                pgconn.send_prepare(_ROLE_SWITCH_NAME, SWITCH_TO_ROLE)
            pgconn.send_query_prepared(_ROLE_SWITCH_NAME, [role.encode()])
            for name, values in bound:
                pgconn.send_query_prepared(name, values)
            pgconn.pipeline_sync()
            wanted = len(bound) + (1 if switch_prepared else 2)
            if isinstance(connection, psycopg.AsyncConnection):
                results = await_(connection.wait(_pipeline_results(pgconn, wanted)))
            else:
                results = connection.wait(_pipeline_results(pgconn, wanted))
        except BaseException:
            # It stays in pipeline mode only when its results were not all read (the
            # connection broke, or the request was cancelled): its pool discards it then.
            with contextlib.suppress(psycopg.OperationalError):
                pgconn.exit_pipeline_mode()
            raise
        pgconn.exit_pipeline_mode()
        if not switch_prepared:
            parsed, *results = results
            if parsed.status == _FATAL_ERROR:
                # Nothing ran (the rest of the pipeline was skipped): the script goes instead.
                # A session that has the name already (nothing here prepares it twice) has it.
                if parsed.error_field(DiagnosticField.SQLSTATE) == _DUPLICATE_PREPARED:
                    prepared_on.role_switch_prepared(connection)
                log.warning("role_switch_not_prepared", error=parsed.get_error_message())
                return None
            prepared_on.role_switch_prepared(connection)
        # The role switch's own row is not read: only whether it failed.
        switched, *ran = results
        if switched.status == _FATAL_ERROR:
            _fetched(connection, [switched])
        return _fetched(connection, ran)

    def _escape(self) -> Callable[[bytes], bytes]:
        return psycopg.pq.Escaping(self._connection.pgconn).escape_literal

    def _inline(self, sql: str, values: Mapping[str, Any]) -> str:
        connection = self._connection
        written = inline(sql, values, self._escape())
        if written is not None:
            return written
        if isinstance(connection, psycopg.AsyncConnection):
            return psycopg.AsyncClientCursor(connection).mogrify(sql, values)
        return psycopg.ClientCursor(connection).mogrify(sql, values)

    def _script(self, statements: list[str]) -> list[Fetched]:
        """The statements as one simple-protocol query: one round trip, a result each."""
        connection = self._connection
        connection.pgconn.send_query("; ".join(statements).encode())
        if isinstance(connection, psycopg.AsyncConnection):
            results = await_(connection.wait(execute_generator(connection.pgconn)))
        else:
            results = connection.wait(execute_generator(connection.pgconn))
        return _fetched(connection, results)


def _pipeline_results(pgconn: PGconn, count: int) -> PQGen[list[PGresult]]:
    """Sends a pipeline of ``count`` queries and its Sync, and reads their results: each
    query's (an error, and after it each later query's ``PIPELINE_ABORTED``), then the Sync's."""
    yield from send_generator(pgconn)
    results: list[PGresult] = []
    for _ in range(count):
        results.extend((yield from fetch_many(pgconn)))
    synced = yield from fetch(pgconn)
    if synced is None or synced.status != _PIPELINE_SYNC:
        raise psycopg.InternalError("a pipeline's results did not end with its Sync")
    return results


def _rows_of(columns: tuple[str, ...], rows: list[tuple[Any, ...]], entry: _Compiled) -> Rows:
    if entry.result_processors:
        rows = [_processed(row, entry.result_processors) for row in rows]
    return Rows(columns, rows)


Fetched = tuple[tuple[str, ...], list[tuple[Any, ...]]]
# The result of a statement that returns no rows (BEGIN, COMMIT).
_NO_ROWS: Fetched = ((), [])


def _columns(result: PGresult | None) -> tuple[str, ...]:
    # Not a cursor's description: it builds a Column object per column on every access (about
    # 8 µs each in a profile, 0.2 ms for a customer row), where only the names are needed.
    if result is None or not result.nfields:
        return ()
    # A list comprehension, not a generator: one call, not one resumption a column.
    return tuple([result.fname(index).decode() for index in range(result.nfields)])  # type: ignore[union-attr]


def _fetch(
    cursor: psycopg.Cursor[Any], sql: str, values: Sequence[MutableMapping[str, Any]]
) -> Fetched:
    if len(values) == 1:
        cursor.execute(sql, values[0])
    else:
        cursor.executemany(sql, values, returning=True)
    columns = _columns(cursor.pgresult)
    rows: list[tuple[Any, ...]] = []
    while columns:
        rows.extend(cursor.fetchall())
        if not cursor.nextset():
            break
    return columns, rows


async def _fetch_async(
    cursor: psycopg.AsyncCursor[Any], sql: str, values: Sequence[MutableMapping[str, Any]]
) -> Fetched:
    if len(values) == 1:
        await cursor.execute(sql, values[0])
    else:
        await cursor.executemany(sql, values, returning=True)
    columns = _columns(cursor.pgresult)
    rows: list[tuple[Any, ...]] = []
    while columns:
        rows.extend(await cursor.fetchall())
        if not cursor.nextset():
            break
    return columns, rows


def _fetched(
    connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], results: list[PGresult]
) -> list[Fetched]:
    """The columns and rows of each result of a script, as a cursor would read them; the first
    failed statement's error raised, as a cursor raises it.

    Read here rather than through a cursor: a script's results come from one wait on the
    connection, and a cursor's execute and its fetch of each result cost a create 6 % of the
    server's instructions (bench/README.md)."""
    fetched: list[Fetched] = []
    for result in results:
        status = result.status
        if status == _TUPLES_OK:
            transformer = Transformer(connection)
            transformer.set_pgresult(result)
            fetched.append((_columns(result), transformer.load_rows(0, result.ntuples, tuple)))
        elif status in (_COMMAND_OK, _EMPTY_QUERY):
            fetched.append(((), []))
        elif status == _FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding=connection.info.encoding)
        else:
            raise psycopg.InternalError(f"unexpected result of a script: {ExecStatus(status).name}")
    return fetched


def _processed(
    row: tuple[Any, ...], processors: tuple[tuple[int, Callable[[Any], Any]], ...]
) -> tuple[Any, ...]:
    values = list(row)
    for index, processor in processors:
        values[index] = processor(values[index])
    return tuple(values)
