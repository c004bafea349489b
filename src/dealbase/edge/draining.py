"""The notice a server process gives its app as it begins to stop (``ops.serving``).

From then on, every answer closes its connection (``RequestEdge``): a client that sends its next
request on a kept-alive connection has it answered and reconnects, to a server still listening,
instead of sending it on a connection about to be closed (and reset). And whatever the app
registered (``on_begin``) runs: the live streams end, telling their clients to reconnect."""

from __future__ import annotations

from collections.abc import Callable


class Draining:
    """Whether the server has begun to stop, and what to call when it does."""

    __slots__ = ("_callbacks", "begun")

    def __init__(self) -> None:
        self.begun = False
        self._callbacks: list[Callable[[], None]] = []

    def on_begin(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls ``callback`` when the server begins to stop (at once, if it has); returns what
        forgets it (an app that stops before its server)."""
        if self.begun:
            callback()
        else:
            self._callbacks.append(callback)
        return lambda: self._forget(callback)

    def begin(self) -> None:
        if self.begun:
            return
        self.begun = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def _forget(self, callback: Callable[[], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)


# A server process serves one app: the server tells this one, and the app reads it.
PROCESS_DRAINING = Draining()
