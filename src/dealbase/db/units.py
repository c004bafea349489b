"""The unit of work: one transaction in one tenant's schema, and what its work may return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol, TypeVar, cast

from dealbase.db.transactions import TenantConnection
from dealbase.tenancy.scope import Scope

T = TypeVar("T")


class Finisher(Protocol):
    """Work a unit of work does last (the events outbox): statements given to ``defer`` for its
    COMMIT's round trip, then what follows the COMMIT."""

    def __init__(self) -> None: ...

    def before_commit(self, connection: TenantConnection) -> None: ...

    def after_commit(self, connection: TenantConnection) -> None: ...


F = TypeVar("F", bound=Finisher)


@dataclass(frozen=True, slots=True)
class UnitOfWork:
    """One transaction in one tenant's schema, opened and committed at the edge, not in services."""

    connection: TenantConnection
    scope: Scope
    # One of each kind, run after the work returned and before COMMIT, in the order they were
    # first asked for. Shared with the narrowed units of work of the same transaction.
    finishers: dict[type[Finisher], Finisher] = field(default_factory=dict)

    def finisher(self, kind: type[F]) -> F:
        """The transaction's finisher of that kind, made on first use."""
        found = self.finishers.get(kind)
        if found is None:
            found = self.finishers[kind] = kind()
        return cast(F, found)

    def finish(self) -> None:
        """Commits, with what the finishers defer to the COMMIT, then runs what they do after
        it; the unit of work calls it once its work has returned (a second call does nothing)."""
        if self.connection.committed:
            return
        for finisher in self.finishers.values():
            finisher.before_commit(self.connection)
        self.connection.commit()
        for finisher in self.finishers.values():
            finisher.after_commit(self.connection)

    def narrowed_to(self, scope: Scope) -> UnitOfWork:
        """The same transaction for a narrower Scope of the same tenant (one department)."""
        if scope.schema != self.scope.schema:
            raise ValueError("a unit of work never changes tenant")
        return replace(self, scope=scope)


class RunAgain(Exception):
    """Raised by a unit of work that lost a race its own statement cannot settle (an insert of
    an external id that another transaction inserted after its lookup, and committed):
    ``Database.run`` rolls it back and runs its work again, which then finds what the other
    wrote, at most ``RUNS`` times in all; ``outcome`` is what the last one answers."""

    def __init__(self, outcome: Exception) -> None:
        super().__init__(str(outcome))
        self.outcome = outcome


# How many times ``Database.run`` runs a unit of work that keeps losing races (``RunAgain``).
RUNS = 3


@dataclass(frozen=True, slots=True)
class AfterCommit(Generic[T]):
    """What a unit of work's work returns when its result is made from rows that go with the
    COMMIT (``TenantConnection.defer``): ``Database.run`` calls ``read`` once committed. A
    caller that needs the result before (to store it in the same transaction) calls ``read``
    itself, and the deferred statements go then."""

    read: Callable[[], T]
