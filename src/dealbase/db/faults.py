"""The driver's errors a repository gives a meaning to, in the project's own terms.

A repository says what a failed statement means to its caller (an external id taken, a
department without steps) from the kind of fault and the table, column or constraint it names;
it never sees psycopg's classes or ``diag``, so the driver stays this package's business. A
fault no meaning claims goes on as the driver raised it: ``database_faults`` (below) makes
it a 503 or leaves it a 500, as for any other statement.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import psycopg
import sqlalchemy.exc
from psycopg_pool import PoolTimeout

from dealbase.errors import DatabaseTimeout, DatabaseUnavailable

# Any error of the driver, for code that ends a unit of work on every database failure.
DriverError = psycopg.Error

FaultKind = Literal["unique", "not_null", "foreign_key", "serialization", "lock_timeout"]

# By SQLSTATE, which every server and pgbouncer pass on unchanged.
_KINDS: dict[str, FaultKind] = {
    "23505": "unique",
    "23502": "not_null",
    "23503": "foreign_key",
    "40001": "serialization",
    "55P03": "lock_timeout",
}


@dataclass(frozen=True, slots=True)
class Fault:
    """A statement's failure of a kind a caller may mean something by, and what it names."""

    kind: FaultKind
    table: str | None
    column: str | None
    constraint: str | None


# What a statement's failure means to its caller: the error to raise instead, or None (the
# database's error stands).
ErrorMeaning = Callable[[Fault], Exception | None]


# What a message names, as PostgreSQL quotes it ('column "step_id" of relation "deals"').
_NAMED = re.compile(r'\b(relation|table|column|constraint) "([^"]+)"')
# The suffix of a shard's name, and of its constraints': its table's or constraint's, then
# "_" and the shard's id.
_SHARD_SUFFIX = re.compile(r"_[0-9]+$")


def fault_of(error: BaseException) -> Fault | None:
    """``error`` as a Fault when it is one of the kinds a caller may mean something by."""
    if not isinstance(error, psycopg.Error):
        return None
    kind = _KINDS.get(error.sqlstate or "")
    if kind is None:
        return None
    diag = error.diag
    if diag.table_name is None and diag.column_name is None and diag.constraint_name is None:
        return _relayed(kind, diag.message_primary or "")
    return Fault(kind, diag.table_name, diag.column_name, diag.constraint_name)


def _relayed(kind: FaultKind, message: str) -> Fault:
    """A fault a Citus coordinator passed on from a worker: with the worker's message, but
    without the fields that name the table, column and constraint, which the message names (the
    shard's, which end in its id)."""
    named: dict[str, str] = {}
    for noun, name in _NAMED.findall(message):
        if noun == "column":
            named.setdefault("column", name)
        else:
            key = "constraint" if noun == "constraint" else "table"
            named.setdefault(key, _SHARD_SUFFIX.sub("", name))
    return Fault(kind, named.get("table"), named.get("column"), named.get("constraint"))


def meant(error: BaseException, meaning: ErrorMeaning) -> Exception | None:
    """What ``meaning`` makes of ``error``, or None when it is no Fault or means nothing."""
    fault = fault_of(error)
    return None if fault is None else meaning(fault)


@contextmanager
def faults_meaning(meaning: ErrorMeaning) -> Iterator[None]:
    """A statement run inside that fails with a fault ``meaning`` claims raises its error."""
    try:
        yield
    except psycopg.Error as exc:
        error = meant(exc, meaning)
        if error is None:
            raise
        raise error from None


# Seconds a client is told to wait (Retry-After) before retrying what the database could not do.
RETRY_AFTER_SECONDS = 2


def _timed_out(error: BaseException | None) -> bool:
    return isinstance(error, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable)


# The faults a retry may outlive, by SQLSTATE: the connection (class 08, also a Citus worker out
# of reach), resources (53: too many connections, memory, disk), the server stopping or starting
# (57P01 to 57P05), a deadlock or a serialization failure (40P01, 40001). Any other error the
# server answers is permanent: the same request meets it again (psycopg files several of those
# under OperationalError too, such as 55P02 or a Citus worker's 55000).
_TRANSIENT_CLASSES = ("08", "53")
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "40001", "40P01"})


# Citus reports a worker that refuses its connection's role as a connection failure (08006), as
# it reports a worker out of reach; only the worker's words, which Citus quotes, tell a login
# refused for good from a node that is down ("Connection refused").
_LOGIN_REFUSED = re.compile(
    r"failed with the following error: FATAL:\s+(role \".*\" is not permitted to log in"
    r"|password authentication failed|no pg_hba\.conf entry"
    r"|role \".*\" does not exist|database \".*\" does not exist)"
)


# Citus reports a worker lost as it was told to commit as an internal error (XX000): whether the
# worker committed is not known, as when a single server's connection breaks during a COMMIT.
_COMMIT_UNCONFIRMED = re.compile(r"^could not commit transaction for shard \d+ on ")


def is_transient(error: BaseException | None) -> bool:
    """Whether ``error`` (psycopg's, or the pool's) is a fault a retry may outlive, not an
    error of the request or of the database's state."""
    if isinstance(error, PoolTimeout):
        return True
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate
    if state is None:
        # The client's own: no connection, or it broke before the server answered.
        return isinstance(error, psycopg.OperationalError)
    if state.startswith("08") and _LOGIN_REFUSED.search(str(error)):
        return False
    if state == "XX000":
        return bool(_COMMIT_UNCONFIRMED.match(str(error)))
    return state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_STATES


@contextmanager
def database_faults() -> Iterator[None]:
    """The driver's faults as the errors a client is told of: a timeout or a transient fault
    (``is_transient``) is a 503 to retry (``Retry-After``); any other database error goes on
    as it is, an internal error with the database's message in the log."""
    try:
        yield
    except (
        psycopg.Error,
        PoolTimeout,
        sqlalchemy.exc.DBAPIError,
        sqlalchemy.exc.TimeoutError,
    ) as exc:
        cause = exc.orig if isinstance(exc, sqlalchemy.exc.DBAPIError) else exc
        if _timed_out(cause):
            raise DatabaseTimeout(
                "The database did not finish in time; try again.",
                retry_after_seconds=RETRY_AFTER_SECONDS,
            ) from exc
        if is_transient(cause) or isinstance(exc, sqlalchemy.exc.TimeoutError):
            raise DatabaseUnavailable(
                "The database is unavailable; try again.", retry_after_seconds=RETRY_AFTER_SECONDS
            ) from exc
        raise
