"""Live connections' objects moved out of the garbage collector's way once they settle."""

from __future__ import annotations

import gc
from typing import Any


class Freezing:
    """Live connections' objects moved into the garbage collector's permanent generation once
    they have settled, as the app's own are at startup (``app``).

    A full collection visits every tracked object not frozen, with the event loop stopped: a
    worker holding hundreds of subscriptions holds their tasks, streams, executors and contexts,
    and every subscriber's next change waited for each of its full collections. Once
    ``after_opened`` connections have opened and none for ``settle_seconds``, the young
    garbage is collected and everything else frozen. Frozen objects are never visited, so the
    cycles of connections closed since stay; once more have closed than remain open, everything
    is unfrozen, collected and frozen again: one full pause where many would have been.
    """

    def __init__(
        self, *, after_opened: int = 100, settle_seconds: float = 1.0, collector: Any = gc
    ) -> None:
        self.after_opened = after_opened
        self.settle_seconds = settle_seconds
        self._gc = collector
        self._opened = 0
        self._closed = 0
        self._last_opened = 0.0

    def opened(self, now: float) -> None:
        self._opened += 1
        self._last_opened = now

    def closed(self) -> None:
        self._closed += 1

    def tick(self, now: float, open_count: int) -> str | None:
        """Freezes (``frozen``) or collects what was frozen (``refrozen``) when it is time."""
        if self._closed >= self.after_opened and self._closed > open_count:
            self._gc.unfreeze()
            self._gc.collect()
            self._gc.freeze()
            self._opened = self._closed = 0
            return "refrozen"
        if self._opened >= self.after_opened and now - self._last_opened >= self.settle_seconds:
            self._gc.collect(1)
            self._gc.freeze()
            self._opened = 0
            return "frozen"
        return None
