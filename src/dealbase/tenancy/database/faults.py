"""The driver's errors a repository gives a meaning to, in the project's own terms.

A repository says what a failed statement means to its caller (an external id taken, a
department without steps) from the kind of fault and the table, column or constraint it names;
it never sees psycopg's classes or ``diag``, so the driver stays this package's business. A
fault no meaning claims goes on as the driver raised it: ``connections.database_faults`` makes
it a 503 or leaves it a 500, as for any other statement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import psycopg

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


def fault_of(error: BaseException) -> Fault | None:
    """``error`` as a Fault when it is one of the kinds a caller may mean something by."""
    if not isinstance(error, psycopg.Error):
        return None
    kind = _KINDS.get(error.sqlstate or "")
    if kind is None:
        return None
    diag = error.diag
    return Fault(kind, diag.table_name, diag.column_name, diag.constraint_name)


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
