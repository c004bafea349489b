"""The process's one ``LISTEN`` connection, shared by every part that hears notifications.

Each part (the key cache, the live hub, whatever comes next) registers a ``Subscriber``: the
channels it hears and what it does with a notice of each. One thread holds one direct
connection (pgbouncer in transaction mode cannot carry LISTEN), listens on every channel
registered, and hands each notice to the subscribers of its channel; one connection per process
rather than one per part, which PostgreSQL's connection slots pay for.

A notice sent while the connection is down is lost, so each subscriber is told when its channels
are heard (``on_up``: it reads again what it may have missed) and when they are no longer
(``on_down``: it stops trusting what it holds). The connection comes back after 0.1, 0.5, 1, 2,
then every 5 seconds.

``Notifier`` sends notices, on a connection of its own: a connection that notifies and listens
would hold its notifying transactions up behind its wait for notices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog

from dealbase.db.database import libpq_url

log = structlog.get_logger(__name__)

APPLICATION_NAME = "dealbase-listener"
_RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)
# How long the thread waits for a notice before it looks for new channels, or whether to stop.
_LISTEN_WAIT_SECONDS = 0.2


def _nothing() -> None:
    pass


@dataclass(frozen=True, eq=False)
class Subscriber:
    """``channels``: each channel heard and what is told its payloads. The callbacks run on the
    listener's thread, holding its lock: they must be quick and must not subscribe."""

    channels: Mapping[str, Callable[[str], None]]
    on_up: Callable[[], None] = _nothing
    on_down: Callable[[], None] = _nothing


@dataclass
class _Heard:
    subscriber: Subscriber
    # Whether it has been told its channels are heard on the connection now up.
    told_up: bool = False


class Notifications:
    """The thread holding the process's LISTEN connection; ``start`` once, ``stop`` once."""

    def __init__(self, database_url: str, application_name: str = APPLICATION_NAME) -> None:
        self.url = libpq_url(database_url)
        self._application_name = application_name
        self._heard: list[_Heard] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="listener", daemon=True)

    def subscribe(self, subscriber: Subscriber) -> None:
        """Its channels are listened on from the thread's next look (at most
        ``_LISTEN_WAIT_SECONDS``), and it is told ``on_up`` then."""
        with self._lock:
            self._heard.append(_Heard(subscriber))

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Once this returns, ``subscriber`` is told nothing more."""
        with self._lock:
            self._heard = [heard for heard in self._heard if heard.subscriber is not subscriber]

    def start(self, wait_seconds: float = 5.0) -> None:
        """Starts the thread and waits, at most ``wait_seconds``, for the connection."""
        self._thread.start()
        self._ready.wait(wait_seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self.url,
                    autocommit=True,
                    connect_timeout=5,
                    application_name=self._application_name,
                ) as connection:
                    listening: set[str] = set()
                    attempt = 0
                    while not self._stop.is_set():
                        self._listen_to_new(connection, listening)
                        self._ready.set()
                        for notice in connection.notifies(timeout=_LISTEN_WAIT_SECONDS):
                            self._dispatch(notice.channel, notice.payload)
            except psycopg.Error as exc:
                self._down()
                delay = _RECONNECT_DELAYS[min(attempt, len(_RECONNECT_DELAYS) - 1)]
                log.warning("listener_down", error=str(exc).splitlines()[0], retry_in_s=delay)
                attempt += 1
                self._stop.wait(delay)
        self._down()

    def _listen_to_new(self, connection: psycopg.Connection[Any], listening: set[str]) -> None:
        """LISTENs to the channels subscribed since the last look, then tells each subscriber
        not yet told that its channels are heard."""
        with self._lock:
            wanted = {channel for heard in self._heard for channel in heard.subscriber.channels}
        new = sorted(wanted - listening)
        if new:
            # One statement: the connection's query in pg_stat_activity says LISTEN.
            connection.execute("; ".join(f"LISTEN {channel}" for channel in new))
            listening.update(new)
        with self._lock:
            for heard in self._heard:
                if not heard.told_up and listening.issuperset(heard.subscriber.channels):
                    heard.told_up = True
                    heard.subscriber.on_up()

    def _dispatch(self, channel: str, payload: str) -> None:
        with self._lock:
            for heard in self._heard:
                on_notice = heard.subscriber.channels.get(channel)
                if on_notice is not None and heard.told_up:
                    on_notice(payload)

    def _down(self) -> None:
        with self._lock:
            for heard in self._heard:
                heard.told_up = False
                heard.subscriber.on_down()


class Notifier:
    """Sends notices on a connection of its own, opened at the first and after a failure."""

    def __init__(self, database_url: str, application_name: str) -> None:
        self._url = libpq_url(database_url)
        self._application_name = application_name
        self._connection: psycopg.Connection[Any] | None = None

    def notify(self, channel: str, payloads: Sequence[str]) -> str | None:
        """Sends each payload on ``channel`` in one transaction; the error's first line when
        it could not (the connection is then closed, and opened again next time)."""
        try:
            if self._connection is None or self._connection.closed:
                self._connection = psycopg.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=5,
                    application_name=self._application_name,
                )
            self._connection.execute(
                "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
                (channel, list(payloads)),
            )
        except psycopg.Error as exc:
            self.close()
            return str(exc).splitlines()[0]
        return None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None
