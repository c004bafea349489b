"""How server processes tell each other that a tenant committed events, and hear of key changes.

Each server process holds one ``LISTEN`` connection (a direct one: pgbouncer in transaction mode
cannot carry LISTEN) on two channels: ``dealbase_events``, whose payload is a tenant schema that
committed events, and ``dealbase_api_keys``, the key and tenant changes the key cache hears too
(live subscriptions of a revoked key or a suspended tenant are ended on it).

The writers do not notify in their own transactions: a transaction that notifies takes a lock
that every other notifying transaction of the database waits for at its COMMIT, so the writes of
unrelated tenants would queue behind each other. Instead a write's COMMIT tells the process's
announcer the schema (``events.repository.committed_listeners``: a set insertion), and the
announcer sends the schemas gathered meanwhile in one ``pg_notify`` statement on a connection of
its own: one notifying transaction per batch of writes and per process, and at most one every
``ANNOUNCE_INTERVAL_SECONDS``. Announcing as soon as a commit came (a busy department commits
a thousand times a second) cost nearly every write a notifying transaction in PostgreSQL and a
wakeup of the announcer and of every server's listener: one department's ``POST /customers``
ran at 0.45 of the baseline's against 0.57 with the interval (bench/README.md). A write made
outside a server (the CLI) announces nothing; the hub's periodic read (``poll_seconds``) finds it.

Both connections are held by threads of their own, as the key cache's listener is: their waits
and round trips never take a turn of the event loop that serves requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import structlog
from anyio import to_thread

from dealbase.platform.events import repository as events_repository
from dealbase.tenancy.callers.api_keys import KEY_CHANGES_CHANNEL
from dealbase.tenancy.database.connections import libpq_url

log = structlog.get_logger(__name__)

# After an announcement, the commits of this long are gathered into the next one: a subscriber
# hears of a commit at most this much later.
ANNOUNCE_INTERVAL_SECONDS = 0.02

EVENTS_CHANNEL = "dealbase_events"
_RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)
# How long the listener waits for a notice before it looks whether it is to stop.
_LISTEN_WAIT_SECONDS = 0.2


class Signals:
    """The process's LISTEN connection and its announcer of local commits.

    ``on_events(schema)``: a tenant committed events; ``schema`` is None when notices may have
    been missed (the connection was down), and every channel should read on. ``on_key_change``
    gets the key channel's payload. Both are called on the event loop ``start`` ran in.
    """

    def __init__(
        self,
        database_url: str,
        on_events: Callable[[str | None], None],
        on_key_change: Callable[[str], None],
        *,
        poll_seconds: float = 5.0,
    ) -> None:
        self._url = libpq_url(database_url)
        self._on_events = on_events
        self._on_key_change = on_key_change
        self.poll_seconds = poll_seconds
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._poll: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        events_repository.committed_listeners.append(self.committed)
        self._threads = [
            threading.Thread(target=self._listen, name="live-listener", daemon=True),
            threading.Thread(target=self._announce, name="live-announcer", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._poll = asyncio.create_task(self._read_now_and_then(), name="live-poll")

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            events_repository.committed_listeners.remove(self.committed)
        self._stop.set()
        self._wake.set()
        if self._poll is not None:
            self._poll.cancel()
            await asyncio.gather(self._poll, return_exceptions=True)
        for thread in self._threads:
            await to_thread.run_sync(thread.join, 5.0)
        self._threads = []

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

    def _announce(self) -> None:
        connection: psycopg.Connection[Any] | None = None
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
                try:
                    if connection is None or connection.closed:
                        connection = psycopg.connect(
                            self._url,
                            autocommit=True,
                            connect_timeout=5,
                            application_name="dealbase-live-announcer",
                        )
                    connection.execute(
                        "SELECT pg_notify(%s, schema) FROM unnest(%s::text[]) AS schema",
                        (EVENTS_CHANNEL, schemas),
                    )
                except psycopg.Error as exc:
                    # Subscribers of other processes find these events at their next read
                    # (the next announcement, or the periodic one).
                    log.warning("live_announce_failed", error=str(exc).splitlines()[0])
                    if connection is not None:
                        connection.close()
                    connection = None
                if self._stop.wait(ANNOUNCE_INTERVAL_SECONDS):
                    return
        finally:
            if connection is not None:
                connection.close()

    def _listen(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=5,
                    application_name="dealbase-live-listener",
                ) as connection:
                    connection.execute(f"LISTEN {EVENTS_CHANNEL}")
                    connection.execute(f"LISTEN {KEY_CHANGES_CHANNEL}")
                    attempt = 0
                    self._on_loop(self.listening.set)
                    # Whatever committed while nobody listened.
                    self._on_loop(self._on_events, None)
                    while not self._stop.is_set():
                        for notice in connection.notifies(timeout=_LISTEN_WAIT_SECONDS):
                            if notice.channel == EVENTS_CHANNEL:
                                self._on_loop(self._on_events, notice.payload)
                            else:
                                self._on_loop(self._on_key_change, notice.payload)
            except psycopg.Error as exc:
                self._on_loop(self.listening.clear)
                delay = _RECONNECT_DELAYS[min(attempt, len(_RECONNECT_DELAYS) - 1)]
                log.warning("live_listener_down", error=str(exc).splitlines()[0], retry_in_s=delay)
                attempt += 1
                self._stop.wait(delay)

    async def _read_now_and_then(self) -> None:
        """Every channel reads on now and then: the writes no server announced (the CLI's), and
        any notice lost with a connection."""
        while True:
            await asyncio.sleep(self.poll_seconds)
            self._on_events(None)
