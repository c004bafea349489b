"""WebSockets that have not introduced themselves yet (no ``connection_init``): each may hold a
message being assembled, up to its limit, with no key to charge it to, so a server process
holds only so many of them, and so many per client address."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Introductions:
    per_address: int
    in_all: int
    _waiting: Counter[str] = field(default_factory=Counter)
    _count: int = 0

    def enter(self, address: str) -> bool:
        """Counts one more connection of ``address`` until its ``leave``; False (and nothing
        counted) when either cap is reached."""
        if self._count >= self.in_all or self._waiting[address] >= self.per_address:
            return False
        self._waiting[address] += 1
        self._count += 1
        return True

    def leave(self, address: str) -> None:
        self._count -= 1
        left = self._waiting[address] - 1
        if left:
            self._waiting[address] = left
        else:
            del self._waiting[address]

    def __len__(self) -> int:
        return self._count
