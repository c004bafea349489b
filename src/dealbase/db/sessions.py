"""What a connection's session holds between units of work, and the statements that change it:
the tenant's role a transaction runs as, and the settings a statement runs under.

Each change is a statement of its own, and a round trip of two statements goes as a pipeline,
which costs psycopg far more CPU than one statement sent alone. So a
connection of the event loop's pool keeps, for its session, the role and the settings of the
last unit of work that committed on it (``Sessions``), and a unit of work that needs the same
sends its statements alone. Without ``Sessions`` (behind pgbouncer in transaction mode, whose
next transaction may run on another server connection) each transaction changes them for
itself, until it ends.
"""

from __future__ import annotations

import enum
import re
import weakref
from dataclasses import dataclass

# The switch to the tenant's role as one statement taking the role as its parameter: ``SET
# ROLE`` is the ``role`` setting, so ``set_config`` of it local to the transaction checks the
# login role's membership and ends with the transaction, commit or rollback, as ``SET LOCAL
# ROLE`` does: the pooled connection (or a pgbouncer server connection) goes back to its next
# user as the login role.
SWITCH_TO_ROLE = "SELECT set_config('role', $1, true)"
# The same switch for the session: it outlives the transaction that made it, once committed.
SWITCH_SESSION_TO_ROLE = "SELECT set_config('role', $1, false)"

# Settings given as two arrays, names and values, in one statement whatever they are; the first
# parameter says whether for the transaction only (``SET LOCAL``) or for the session.
SET_SETTINGS = (
    "SELECT set_config(given.name, given.value, $1)"
    " FROM unnest($2::text[], $3::text[]) AS given(name, value)"
)

_SETTING_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# The name of every setting some ``StatementSettings`` sets: what a session may hold that its
# next statement does not want, where what it holds is not known.
_MANAGED: set[str] = set()


def switch_to(role: str) -> tuple[str, str]:
    """The statements that open a raw session's transaction as ``role`` (a tenant's), for code
    that runs SQL of its own rather than a unit of work (exports, tests)."""
    return "BEGIN", f'SET LOCAL ROLE "{role}"'


@dataclass(frozen=True, slots=True)
class StatementSettings:
    """Settings some statements run under (how PostgreSQL plans them, say): in force for each
    statement given them, and back to the server's (what ``RESET`` gives) for each other
    statement of the unit of work and of the units of work after it."""

    values: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        # A name is written into the SQL that resets it (``settings_changes``).
        refused = [name for name, _ in self.values if not _SETTING_NAME.fullmatch(name)]
        if refused or not self.values:
            raise ValueError(f"not settings' names: {refused!r}")
        _MANAGED.update(self.names)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.values)


class NotKnown(enum.Enum):
    """The settings a session holds, when its units of work do not know them."""

    NOT_KNOWN = enum.auto()


NOT_KNOWN = NotKnown.NOT_KNOWN


def settings_changes(
    now: StatementSettings | NotKnown | None, wanted: StatementSettings | None, *, local: bool
) -> list[tuple[str, tuple[list[object], ...]]]:
    """The statements, each with its sets of values, that take a session from the settings
    ``now`` in force (None: the server's) to ``wanted``; ``local``: for the transaction only.

    A setting goes back to the server's value by a statement of its own, ``RESET`` or ``SET
    LOCAL ... TO DEFAULT``, which takes no parameter: ``pg_settings`` has what ``RESET`` gives,
    for one statement whatever the names, but reading it builds every setting's row, dearer
    than the statement it would go before."""
    if now is wanted or now == wanted:  # the same constant, statement after statement
        return []
    held = _MANAGED if now is NOT_KNOWN else set() if now is None else now.names
    stale = sorted(held - (set() if wanted is None else wanted.names))
    changes: list[tuple[str, tuple[list[object], ...]]] = [
        (f"SET LOCAL {name} TO DEFAULT" if local else f"RESET {name}", ()) for name in stale
    ]
    if wanted is not None:
        names, values = zip(*wanted.values, strict=True)
        changes.append((SET_SETTINGS, ([local, list(names), list(values)],)))
    return changes


@dataclass(frozen=True, slots=True)
class SessionState:
    """What a session holds once a unit of work committed on it: its tenant's role, and the
    settings its last statement ran under (None: the server's)."""

    role: str
    settings: StatementSettings | None


class Sessions:
    """The state each connection of the event loop's pool holds for its session, as far as its
    units of work know.

    Only what committed is recorded: a change in a transaction that failed, was rolled back or
    was interrupted is forgotten, and the next unit of work on the connection makes every
    change it needs again. A statement names its tenant's schema, so one run in another
    tenant's role would be refused, never let in. (``SAVEPOINT`` and ``ROLLBACK TO`` run with
    the server's settings, which are then in force both when a savepoint is made and after a
    rollback to it: the record stays true.)
    """

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[object, SessionState] = weakref.WeakKeyDictionary()

    def state_of(self, connection: object) -> SessionState | None:
        """What ``connection``'s session holds, if known."""
        return self._states.get(connection)

    def committed(self, connection: object, state: SessionState) -> None:
        self._states[connection] = state

    def forget(self, connection: object) -> None:
        self._states.pop(connection, None)
