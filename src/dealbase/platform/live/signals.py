"""How server processes tell each other that a tenant committed events, and hear of key changes.

The hub subscribes to the process's one ``LISTEN`` connection
(``db.notifications``) on two channels: ``dealbase_events``, whose payload is a
tenant schema that committed events, and ``dealbase_api_keys``, the key and tenant changes the
key cache hears too (live subscriptions of a revoked key or a suspended tenant are ended on it).

The writers do not notify in their own transactions: a transaction that notifies takes a lock
that every other notifying transaction of the database waits for at its COMMIT, so the writes of
unrelated tenants would queue behind each other. Instead a write's COMMIT tells the process's
announcer the schema (``events.repository.committed_listeners``: a set insertion), and the
announcer sends the schemas gathered meanwhile in one ``pg_notify`` statement on a connection of
its own (a ``Notifier``): one notifying transaction per batch of writes and per process, and at
most one every ``ANNOUNCE_INTERVAL_SECONDS``. Announcing as soon as a commit came (a busy
department commits a thousand times a second) cost nearly every write a notifying transaction in
PostgreSQL and a wakeup of the announcer and of every server's listener, which slowed a busy
department's writes. A write made outside a server (the CLI) announces nothing; the hub's periodic
read (``poll_seconds``) finds it.

Both connections are held by threads of their own: their waits and round trips never take a
turn of the event loop that serves requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from anyio import to_thread

from dealbase.db.notifications import Notifications, Notifier, Subscriber
from dealbase.platform.events import repository as events_repository
from dealbase.tenancy.callers.api_keys import KEY_CHANGES_CHANNEL

log = structlog.get_logger(__name__)

# After an announcement, the commits of this long are gathered into the next one: a subscriber
# hears of a commit at most this much later.
ANNOUNCE_INTERVAL_SECONDS = 0.02

EVENTS_CHANNEL = "dealbase_events"


class Signals:
    """The hub's subscriber to the process's LISTEN connection, and its announcer of local
    commits.

    ``on_events(schema)``: a tenant committed events; ``schema`` is None when notices may have
    been missed (the connection was down, or has just come up), and every channel should read
    on. ``on_key_change`` gets the key channel's payload. Both are called on the event loop
    ``start`` ran in.
    """

    def __init__(
        self,
        notifications: Notifications,
        on_events: Callable[[str | None], None],
        on_key_change: Callable[[str], None],
        *,
        poll_seconds: float = 5.0,
    ) -> None:
        self._notifications = notifications
        self.listening = asyncio.Event()
        self._notifier = Notifier(notifications.url, "dealbase-live-announcer")
        self._subscriber = Subscriber(
            {
                EVENTS_CHANNEL: partial(self._on_loop, on_events),
                KEY_CHANGES_CHANNEL: partial(self._on_loop, on_key_change),
            },
            on_up=self._up,
            on_down=partial(self._on_loop, self.listening.clear),
        )
        self._on_events = on_events
        self.poll_seconds = poll_seconds
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._announcer: threading.Thread | None = None
        self._poll: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        events_repository.committed_listeners.append(self.committed)
        self._notifications.subscribe(self._subscriber)
        self._announcer = threading.Thread(
            target=self._announce, name="live-announcer", daemon=True
        )
        self._announcer.start()
        self._poll = asyncio.create_task(self._read_now_and_then(), name="live-poll")

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            events_repository.committed_listeners.remove(self.committed)
        self._notifications.unsubscribe(self._subscriber)
        self._stop.set()
        self._wake.set()
        if self._poll is not None:
            self._poll.cancel()
            await asyncio.gather(self._poll, return_exceptions=True)
        if self._announcer is not None:
            await to_thread.run_sync(self._announcer.join, 5.0)
            self._announcer = None

    def committed(self, schema: str) -> None:
        """A unit of work of this process committed events of ``schema`` (any thread)."""
        with self._lock:
            first = not self._pending
            self._pending.add(schema)
        if first:
            self._wake.set()

    def _on_loop(self, call: Callable[..., None], *arguments: Any) -> None:
        if self._loop is not None:
            # RuntimeError: the loop has closed (the app stopped), nobody is left to tell.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(call, *arguments)

    def _up(self) -> None:
        """The channels are heard (again): whatever committed while nobody listened is read."""
        self._on_loop(self.listening.set)
        self._on_loop(self._on_events, None)

    def _announce(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop.is_set():
                    return
                with self._lock:
                    schemas, self._pending = sorted(self._pending), set()
                if not schemas:
                    continue
                failed = self._notifier.notify(EVENTS_CHANNEL, schemas)
                if failed is not None:
                    # Subscribers of other processes find these events at their next read
                    # (the next announcement, or the periodic one).
                    log.warning("live_announce_failed", error=failed)
                if self._stop.wait(ANNOUNCE_INTERVAL_SECONDS):
                    return
        finally:
            self._notifier.close()

    async def _read_now_and_then(self) -> None:
        """Every channel reads on now and then: the writes no server announced (the CLI's), and
        any notice lost with a connection."""
        while True:
            await asyncio.sleep(self.poll_seconds)
            self._on_events(None)
