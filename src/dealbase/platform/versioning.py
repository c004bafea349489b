"""Optimistic concurrency: every changeable row has a version; a writer may name the versions it
expects (HTTP's If-Match), and the change happens only if the row is still at one of them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Expected:
    """The versions a change may apply to; ``versions=None`` admits any (``If-Match: *``)."""

    versions: frozenset[int] | None

    def admits(self, version: int) -> bool:
        return self.versions is None or version in self.versions
