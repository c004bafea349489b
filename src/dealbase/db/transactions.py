"""A unit of work's transaction on one psycopg connection, in as few round trips as it can.

A round trip of one statement is that statement alone; one of several is one pipeline of
psycopg's (``Connection.pipeline()``): its statements go one after another without waiting for
each other's results, and a Sync ends it. Every value is bound as a parameter, never written
into the SQL text. psycopg prepares a statement on the server once a connection has run it
``prepare_threshold`` times (``Database``), so a create's INSERT is parsed and planned once per
connection, not per request.

The connections are in autocommit mode: psycopg sends no ``BEGIN`` of its own. A unit of work
that is one round trip (a read, a create) sends its opening (the switch to the tenant's role,
unless the connection holds it: ``sessions``) and its statements before one Sync, and
PostgreSQL runs them as one implicit transaction: committed at the Sync, or rolled back as a
whole when one fails (where ``set_config(..., true)`` holds to its end, as ``SET LOCAL`` does).
A statement may run under settings of its own (``StatementSettings``), changed before it
where the session does not hold them already.
A unit of work of several round trips opens an explicit ``BEGIN`` with its first and ends with
``COMMIT`` in its last. Without pipelines (behind pgbouncer) every statement is an exchange of
its own and every transaction explicit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog
from psycopg.pq import ExecStatus
from sqlalchemy.sql import ClauseElement
from sqlalchemy.util import await_

from dealbase.db.faults import ErrorMeaning, meant
from dealbase.db.sessions import (
    NOT_KNOWN,
    SWITCH_SESSION_TO_ROLE,
    SWITCH_TO_ROLE,
    NotKnown,
    Sessions,
    SessionState,
    StatementSettings,
    settings_changes,
)
from dealbase.db.statements import Compiled, Rows, StatementCache, StatementListener

log = structlog.get_logger(__name__)

_TUPLES_OK = ExecStatus.TUPLES_OK


# A statement's sets of values, each in the order of its placeholders (``$1``...).
Values = Sequence[Sequence[Any]]
# A statement's columns and rows.
Fetched = tuple[tuple[str, ...], list[tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class _Call:
    """A statement with its values: one set, or many (run once per set, in the same trip). Its
    text encoded, as psycopg sends it (``StatementCache`` keeps a rendered one so)."""

    sql: bytes
    values: Values


_BEGIN = _Call(b"BEGIN", ())
_COMMIT = _Call(b"COMMIT", ())
_SWITCH_TO_ROLE = SWITCH_TO_ROLE.encode()
_SWITCH_SESSION_TO_ROLE = SWITCH_SESSION_TO_ROLE.encode()


class Deferred:
    """A statement that travels with the unit of work's next round trip: the next statement
    that runs, or the COMMIT. ``rows()`` reads its rows once it has gone, and sends it (with
    whatever else waits) if it has not."""

    __slots__ = ("_entry", "_owner", "_rows", "call", "meaning", "number")

    def __init__(
        self,
        call: _Call,
        entry: Compiled,
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
    """A connection in one transaction whose statements land in one tenant's schema, run as the
    tenant's role.

    On a psycopg ``AsyncConnection`` the platform's synchronous code still calls ``execute``;
    each round trip is awaited underneath on the event loop (SQLAlchemy's greenlet bridge, the
    one its own asyncio extension uses), so it must run inside ``database.run_on_event_loop``.

    A unit of work spends as few round trips as it can: its opening (the role switch, and the
    ``BEGIN`` unless it is one round trip) travels with its first statement, and the statements
    given to ``defer`` travel with the next one, or with the ``COMMIT``.
    """

    __slots__ = (
        "_begun",
        "_commit_with_next",
        "_committed",
        "_connection",
        "_deferred",
        "_deferred_total",
        "_distributed",
        "_held",
        "_in_force",
        "_listeners",
        "_pipelines",
        "_role",
        "_schema_name",
        "_sessions",
        "_statements",
    )

    def __init__(
        self,
        connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
        schema: str,
        statements: StatementCache,
        listeners: Sequence[StatementListener] = (),
        *,
        role: str,
        sessions: Sessions | None = None,
        pipelines: bool = True,
        distributed: bool = False,
    ) -> None:
        self._connection = connection
        self._distributed = distributed
        self._role = role
        # Where the connection keeps its role and settings between units of work; None: each
        # transaction changes them for itself, until it ends.
        self._sessions = sessions
        # What the session holds as the next transaction begins (None: not known).
        self._held = None if sessions is None else sessions.state_of(connection)
        # The settings in force in the transaction so far (None: the server's).
        self._in_force: StatementSettings | NotKnown | None = NOT_KNOWN
        # False: a round trip's statements go one at a time, each its own exchange, and every
        # transaction has its BEGIN and COMMIT (behind pgbouncer in transaction mode, which
        # loses track of a pipeline whose statement fails and hands the rest to another server
        # connection).
        self._pipelines = pipelines
        self._schema_name = schema
        self._statements = statements
        self._listeners = listeners
        self._begun = False
        self._committed = False
        self._commit_with_next = False
        self._deferred: list[Deferred] = []  # not sent yet, in the order given
        self._deferred_total = 0

    @property
    def distributed(self) -> bool:
        """Whether the schema is a Citus distributed schema: a write then sends plain statements
        Citus routes whole to the tenant's worker, where one statement of data-modifying CTEs
        would run as subplans through the coordinator."""
        return self._distributed

    @property
    def committed(self) -> bool:
        return self._committed

    def _render(
        self,
        statement: ClauseElement,
        parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    ) -> tuple[_Call, Compiled]:
        if parameters is None:
            parameter_sets: Sequence[Mapping[str, Any]] = ()
        elif isinstance(parameters, Mapping):
            parameter_sets = (parameters,)
        else:
            parameter_sets = parameters
        sql, values, entry = self._statements.render(statement, parameter_sets, self._schema_name)
        for listener in self._listeners:
            listener(sql.decode())
        return _Call(sql, values), entry

    def execute(
        self,
        statement: ClauseElement,
        parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        settings: StatementSettings | None = None,
    ) -> Rows:
        """Runs ``statement``, under ``settings`` if given, else the server's; a sequence of
        parameter sets runs it once per set (in one round trip), and the rows come back in the
        order of the sets."""
        call, entry = self._render(statement, parameters)
        if self._committed:
            raise RuntimeError("the unit of work has committed: no statement may follow")
        commit = self._commit_with_next
        ((columns, rows),) = self._send([(call, settings)], commit=commit)
        if commit:
            self._committed = True
        return _rows_of(columns, rows, entry)

    def defer(
        self,
        statement: ClauseElement,
        parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        meaning: ErrorMeaning | None = None,
    ) -> Deferred:
        """Runs ``statement`` in the next round trip, before what else goes in it (the next
        statement, or the COMMIT), once per set of ``parameters`` if a sequence; ``rows()``
        after it (every set's, in order). An error in it rolls the transaction
        back, as any statement's would. ``meaning`` says what a database error of that round
        trip means to the caller (an external id taken, as a unique violation): the round trip
        raises that instead, from wherever it was sent (``rows()``, the next statement, the
        COMMIT)."""
        call, entry = self._render(statement, parameters)
        deferred = Deferred(call, entry, self, self._deferred_total, meaning)
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
        """Sends the deferred statements now, in one round trip (with the opening when nothing
        ran before)."""
        if self._deferred:
            self._send([], commit=False)

    def commit_with_next(self) -> None:
        """The next statement is the unit of work's last: it goes with the opening and the
        COMMIT, in one round trip, and any statement after it is refused. For a read that one
        statement answers."""
        self._commit_with_next = True

    @contextlib.contextmanager
    def before_the_last(self) -> Iterator[None]:
        """Statements run now come before the one ``commit_with_next`` awaits, in the same
        transaction (what a cache of the schema's reads when it misses)."""
        last = self._commit_with_next
        self._commit_with_next = False
        try:
            yield
        finally:
            self._commit_with_next = last

    def commit(self) -> None:
        """Sends the deferred statements and the COMMIT, in one round trip (with the opening
        too when nothing ran before; when nothing ran at all, nothing is sent)."""
        if self._begun or self._deferred:
            self._send([], commit=True)
        self._committed = True

    def _send(
        self, calls: list[tuple[_Call, StatementSettings | None]], *, commit: bool
    ) -> list[Fetched]:
        """One round trip: the opening if the transaction has not begun, the deferred
        statements, ``calls`` (each with the settings it runs under), and the COMMIT when
        ``commit``; the results of ``calls``.

        A round trip that is the whole transaction (nothing sent before it, committing) is one
        implicit transaction: the role switch and the statements, without ``BEGIN`` or
        ``COMMIT``, which spares PostgreSQL two statements' parse and execution (on a
        distributed schema, only when it is one statement: ``_implicit_allowed``)."""
        deferred, self._deferred = self._deferred, []
        ends = commit
        if self._begun:
            opening = []
        elif commit and self._pipelines and self._implicit_allowed(len(deferred) + len(calls)):
            opening, commit = self._opening(), False
        else:
            opening = [_BEGIN, *self._opening()]
        self._begun = True
        sent = list(opening)
        places: list[int] = []  # where each deferred statement's, then each call's, result is
        for call, settings in [*((each.call, None) for each in deferred), *calls]:
            sent.extend(self._settings_for(settings))
            places.append(len(sent))
            sent.append(call)
        if commit:
            sent.append(_COMMIT)
        try:
            results = self._round_trip(sent)
        except psycopg.Error as failed:
            self._forget_session()
            for each in deferred:
                error = None if each.meaning is None else meant(failed, each.meaning)
                if error is not None:
                    raise error from failed
            raise
        except BaseException:
            self._forget_session()
            raise
        if ends:
            self._session_committed()
        fetched = [results[place] for place in places]
        for each, (columns, rows) in zip(deferred, fetched[: len(deferred)], strict=True):
            each._rows = _rows_of(columns, rows, each._entry)
        return fetched[len(deferred) :]

    def _implicit_allowed(self, statements: int) -> bool:
        """Whether a transaction of ``statements`` statements may be an implicit one. Not of
        several on a distributed schema: Citus commits a statement run outside a transaction
        block on the worker as it ends, so a later statement's failure would leave it."""
        return statements <= 1 or not self._distributed

    def execute_after_commit(self, statement: ClauseElement, parameters: Mapping[str, Any]) -> bool:
        """Runs ``statement`` in a transaction of its own as the tenant's role, once this one
        has committed: the role switch and it in one round trip, one implicit transaction.

        What committed stays committed, so a database error here is logged and answered False,
        not raised: the caller's work succeeded, and saying otherwise would invite a retry that
        writes it twice.
        """
        if not self._committed:
            raise RuntimeError("only a unit of work that committed its transaction runs one more")
        call, _ = self._render(statement, parameters)
        try:
            statements = [*self._opening(), *self._settings_for(None), call]
            if self._pipelines:
                self._round_trip(statements)
            else:
                self._round_trip([_BEGIN, *statements, _COMMIT])
        except psycopg.Error as failed:
            self._forget_session()
            log.warning(
                "statement_after_commit_failed", schema=self._schema_name, error=str(failed)
            )
            with contextlib.suppress(psycopg.Error):  # a broken connection is the pool's to drop
                self._roll_back()
            return False
        self._session_committed()
        return True

    def _roll_back(self) -> None:
        """Ends the transaction a failed statement left open (one BEGIN opened)."""
        connection = self._connection
        if isinstance(connection, psycopg.AsyncConnection):
            await_(connection.rollback())
        else:
            connection.rollback()

    def _opening(self) -> list[_Call]:
        """What opens a transaction as the tenant's role: nothing when the session holds it
        already (``Sessions``)."""
        sessions, role = self._sessions, self._role
        if sessions is None:
            self._in_force = None  # what the last transaction set ended with it
            return [_Call(_SWITCH_TO_ROLE, ([role],))]
        held = self._held
        self._in_force = NOT_KNOWN if held is None else held.settings
        if held is not None and held.role == role:
            return []
        return [_Call(_SWITCH_SESSION_TO_ROLE, ([role],))]

    def _settings_for(self, wanted: StatementSettings | None) -> list[_Call]:
        """What puts ``wanted`` in force for the next statement, where it is not."""
        changes = settings_changes(self._in_force, wanted, local=self._sessions is None)
        self._in_force = wanted
        return [_Call(sql.encode(), values) for sql, values in changes]

    def _session_committed(self) -> None:
        """The transaction committed: the session holds its role, and its last settings."""
        if self._sessions is not None and self._in_force is not NOT_KNOWN:
            self._held = SessionState(self._role, self._in_force)
            self._sessions.committed(self._connection, self._held)

    def _forget_session(self) -> None:
        self._held = None
        if self._sessions is not None:
            self._sessions.forget(self._connection)

    def _round_trip(self, calls: list[_Call]) -> list[Fetched]:
        """``calls`` as one round trip: one exchange with the server, or without pipelines one
        exchange a statement."""
        if not self._pipelines and len(calls) > 1:
            return [fetched for call in calls for fetched in self._exchange([call])]
        return self._exchange(calls)

    def _exchange(self, calls: list[_Call]) -> list[Fetched]:
        connection = self._connection
        if isinstance(connection, psycopg.AsyncConnection):
            return await_(_round_trip_async(connection, calls))
        return _round_trip(connection, calls)


def _round_trip(connection: psycopg.Connection[Any], calls: list[_Call]) -> list[Fetched]:
    """``calls`` in one pipeline, then a Sync; each call's columns and rows. One statement goes
    alone, without a pipeline: psycopg's costs several times its CPU."""
    if len(calls) == 1:
        return [_fetched(_executed(psycopg.RawCursor(connection), calls[0]))]
    with connection.pipeline():
        cursors = [_executed(psycopg.RawCursor(connection), call) for call in calls]
    return [_fetched(cursor) for cursor in cursors]


def _executed(cursor: psycopg.Cursor[Any], call: _Call) -> psycopg.Cursor[Any]:
    if len(call.values) > 1:
        cursor.executemany(call.sql, call.values, returning=True)
    else:
        cursor.execute(call.sql, call.values[0] if call.values else None)
    return cursor


def _fetched(cursor: psycopg.Cursor[Any]) -> Fetched:
    """Every row of every result of ``cursor`` (one per parameter set)."""
    rows: list[tuple[Any, ...]] = []
    columns = _columns(cursor.pgresult)
    while columns:
        rows.extend(cursor.fetchall())
        if not cursor.nextset():
            break
    return columns, rows


async def _round_trip_async(
    connection: psycopg.AsyncConnection[Any], calls: list[_Call]
) -> list[Fetched]:
    """``_round_trip`` on the event loop."""
    if len(calls) == 1:
        return [
            await _fetched_async(
                await _executed_async(psycopg.AsyncRawCursor(connection), calls[0])
            )
        ]
    async with connection.pipeline():
        cursors = [
            await _executed_async(psycopg.AsyncRawCursor(connection), call) for call in calls
        ]
    return [await _fetched_async(cursor) for cursor in cursors]


async def _executed_async(
    cursor: psycopg.AsyncCursor[Any], call: _Call
) -> psycopg.AsyncCursor[Any]:
    if len(call.values) > 1:
        await cursor.executemany(call.sql, call.values, returning=True)
    else:
        await cursor.execute(call.sql, call.values[0] if call.values else None)
    return cursor


async def _fetched_async(cursor: psycopg.AsyncCursor[Any]) -> Fetched:
    rows: list[tuple[Any, ...]] = []
    columns = _columns(cursor.pgresult)
    while columns:
        rows.extend(await cursor.fetchall())
        if not cursor.nextset():
            break
    return columns, rows


def _columns(result: psycopg.pq.abc.PGresult | None) -> tuple[str, ...]:
    """The names of a result's columns; () for a statement that returns no rows.

    Not a cursor's description: it builds a Column object per column on every access, where
    only the names are needed."""
    if result is None or result.status != _TUPLES_OK:
        return ()
    # A list comprehension, not a generator: one call, not one resumption a column.
    return tuple([(result.fname(index) or b"").decode() for index in range(result.nfields)])


def _rows_of(columns: tuple[str, ...], rows: list[tuple[Any, ...]], entry: Compiled) -> Rows:
    if entry.result_processors:
        rows = [_processed(row, entry.result_processors) for row in rows]
    return Rows(columns, rows)


def _processed(
    row: tuple[Any, ...], processors: tuple[tuple[int, Callable[[Any], Any]], ...]
) -> tuple[Any, ...]:
    values = list(row)
    for index, processor in processors:
        values[index] = processor(values[index])
    return tuple(values)
