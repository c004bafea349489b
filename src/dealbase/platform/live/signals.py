"""How server processes tell each other that a tenant committed events, and hear of key changes.

Each server process holds one ``LISTEN`` connection (a direct one: pgbouncer in transaction mode
cannot carry LISTEN) on two channels: ``dealbase_events``, whose payload is a tenant schema that
committed events, and ``dealbase_api_keys``, the key and tenant changes the key cache hears too
(live subscriptions of a revoked key or a suspended tenant are ended on it).

The writers do not notify in their own transactions: a transaction that notifies takes a lock
that every other notifying transaction of the database waits for at its COMMIT, so the writes of
unrelated tenants would queue behind each other. Instead a write's COMMIT tells the process's
``Announcer`` the schema (``events.repository.committed_listeners``: a set insertion), and its
task sends the schemas gathered meanwhile in one ``pg_notify`` statement on a connection of its
own: one notifying transaction per batch of writes and per process. A write made outside a server
(the CLI) announces nothing; the hub's periodic read (``Signals.poll_seconds``) finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import structlog

from dealbase.platform.events import repository as events_repository
from dealbase.tenancy.api_keys import KEY_CHANGES_CHANNEL
from dealbase.tenancy.database import libpq_url

log = structlog.get_logger(__name__)

EVENTS_CHANNEL = "dealbase_events"
_RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)


class Signals:
    """The process's LISTEN connection and its announcer of local commits.

    ``on_events(schema)``: a tenant committed events; ``schema`` is None when notices may have
    been missed (the connection was down), and every channel should read on. ``on_key_change``
    gets the key channel's payload. Both are called on the event loop.
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
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = asyncio.Event()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        events_repository.committed_listeners.append(self.committed)
        self._tasks = [
            asyncio.create_task(self._listen(), name="live-listener"),
            asyncio.create_task(self._announce(), name="live-announcer"),
            asyncio.create_task(self._poll(), name="live-poll"),
        ]

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            events_repository.committed_listeners.remove(self.committed)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def committed(self, schema: str) -> None:
        """A unit of work of this process committed events of ``schema`` (any thread)."""
        with self._lock:
            first = not self._pending
            self._pending.add(schema)
        if first and self._loop is not None:
            # RuntimeError: the loop has closed (the app stopped), nobody is left to tell.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    async def _announce(self) -> None:
        connection: psycopg.AsyncConnection[Any] | None = None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                with self._lock:
                    schemas, self._pending = sorted(self._pending), set()
                if not schemas:
                    continue
                try:
                    if connection is None or connection.closed:
                        connection = await psycopg.AsyncConnection.connect(
                            self._url,
                            autocommit=True,
                            connect_timeout=5,
                            application_name="dealbase-live-announcer",
                        )
                    await connection.execute(
                        "SELECT pg_notify(%s, schema) FROM unnest(%s::text[]) AS schema",
                        (EVENTS_CHANNEL, schemas),
                    )
                except psycopg.Error as exc:
                    # Subscribers of other processes find these events at their next read
                    # (the next announcement, or the periodic one).
                    log.warning("live_announce_failed", error=str(exc).splitlines()[0])
                    if connection is not None:
                        await connection.close()
                    connection = None
        finally:
            if connection is not None:
                await connection.close()

    async def _listen(self) -> None:
        attempt = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=5,
                    application_name="dealbase-live-listener",
                ) as connection:
                    await connection.execute(f"LISTEN {EVENTS_CHANNEL}")
                    await connection.execute(f"LISTEN {KEY_CHANGES_CHANNEL}")
                    attempt = 0
                    self.listening.set()
                    # Whatever committed while nobody listened.
                    self._on_events(None)
                    async for notice in connection.notifies():
                        if notice.channel == EVENTS_CHANNEL:
                            self._on_events(notice.payload)
                        else:
                            self._on_key_change(notice.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                delay = _RECONNECT_DELAYS[min(attempt, len(_RECONNECT_DELAYS) - 1)]
                log.warning("live_listener_down", error=str(exc).splitlines()[0], retry_in_s=delay)
                attempt += 1
                await asyncio.sleep(delay)

    async def _poll(self) -> None:
        """Every channel reads on now and then: the writes no server announced (the CLI's), and
        any notice lost with a connection."""
        while True:
            await asyncio.sleep(self.poll_seconds)
            self._on_events(None)
