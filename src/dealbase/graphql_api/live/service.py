"""A server process's live connections (``LiveService``): their limits, their registry by key,
the checks that close them, and what they report."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import strawberry
import structlog
from starlette.requests import HTTPConnection

from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.db.notifications import Notifications
from dealbase.edge.live_callers import still_admitted
from dealbase.errors import DomainError, RateLimited, Unavailable
from dealbase.graphql_api.live.execution import sharing_results
from dealbase.graphql_api.live.freezing import Freezing
from dealbase.graphql_api.live.introductions import Introductions
from dealbase.graphql_api.live.protocol import (
    ENDINGS,
    REVOKED,
    SHUTDOWN,
    WRITE_TIMEOUT,
    Closing,
    ServerStopping,
    TooManyConnections,
)
from dealbase.graphql_api.subscriptions import LiveContext
from dealbase.platform.live.hub import Ending, Hub, Limits
from dealbase.platform.live.signals import Signals
from dealbase.tenancy.callers.api_keys import TENANT_NOTICE_PREFIX
from dealbase.tenancy.callers.authentication import Authenticator
from dealbase.tenancy.rate_limits.admission import Admission
from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Scope

log = structlog.get_logger(__name__)

# How often writes that wait are looked at: a connection is closed at most this long after its
# write timeout.
_UNREAD_CHECK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class LiveLimits:
    connections_per_key: int = 20
    subscriptions_per_connection: int = 20
    init_timeout_seconds: float = 5.0
    unintroduced_per_address: int = 16
    unintroduced_per_process: int = 256
    idle_timeout_seconds: float = 300.0
    keepalive_seconds: float = 15.0
    buffer: int = 1000
    poll_seconds: float = 5.0
    write_timeout_seconds: float = 30.0
    # Whether the connections' long-lived objects are frozen out of the collector's way
    # (``Freezing``), as the app's own are at startup.
    freeze_connections: bool = False

    @classmethod
    def of(cls, settings: Settings) -> LiveLimits:
        return cls(
            freeze_connections=settings.freeze_startup_objects,
            connections_per_key=settings.live_connections_per_key,
            subscriptions_per_connection=settings.live_subscriptions_per_connection,
            init_timeout_seconds=settings.live_init_timeout_seconds,
            unintroduced_per_address=settings.live_unintroduced_per_address,
            unintroduced_per_process=settings.live_unintroduced_per_process,
            idle_timeout_seconds=settings.live_idle_timeout_seconds,
            keepalive_seconds=settings.live_keepalive_seconds,
            buffer=settings.live_buffer_events,
            poll_seconds=settings.live_poll_seconds,
            write_timeout_seconds=settings.write_timeout_seconds,
        )


@dataclass
class LiveReports:
    """What the transports report (to the metrics, ``ops.live_metrics``)."""

    opened: Callable[[str], None] = lambda transport: None
    closed: Callable[[str, str], None] = lambda transport, why: None
    sent: Callable[[str], None] = lambda transport: None


def _unrecorded(verdict: Verdict) -> None:
    """A board's verdict goes nowhere: no response carries its headers."""


class Connection:
    """A live connection of one key: a WebSocket or a stream."""

    transport = ""

    def __init__(
        self,
        service: LiveService,
        peer: HTTPConnection,
        scope: Scope,
        credentials: tuple[str, str | None],
    ):
        self.service = service
        self.scope = scope
        self.credentials = credentials
        self.closing: Closing | None = None
        self.closed = asyncio.Event()
        self.opened_at = time.monotonic()
        # Since when (the loop's clock) a write to the client has waited, while one does:
        # ``LiveService`` gives up a connection whose client stopped reading.
        self.writing_since: float | None = None
        authenticator: Authenticator = peer.app.state.authenticator
        self._authenticate = authenticator.dashboard_scope
        self.admission: Admission = peer.app.state.admission

    def recheck(self) -> None:
        """Checks the key again, as a request would present it (the process's key cache, so
        usually no database): a key that expired since the connection opened closes it, and so
        does a revocation whose notice this process missed."""
        self.service.spawn(self._recheck())

    async def _recheck(self) -> None:
        try:
            await self._authenticate(*self.credentials)
        except DomainError:
            self.close(REVOKED)

    def close(self, why: Closing) -> None:
        """Closes the connection with ``why`` (the first reason given wins)."""
        if self.closing is None:
            self.closing = why
            self.closed.set()

    def ended(self, why: Ending) -> None:
        self.close(ENDINGS[why])

    def write_timed_out(self) -> None:
        self.close(WRITE_TIMEOUT)


class LiveService:
    """A server process's live connections, its hub and its LISTEN connection."""

    def __init__(
        self,
        database: Database,
        schema: strawberry.Schema,
        limits: LiveLimits,
        admission: Admission,
        reports: LiveReports | None = None,
    ) -> None:
        self.database = database
        # Each change's results executed once for the subscribers that share a document.
        schema.execution_context_class = sharing_results(schema.execution_context_class)
        self.schema = schema
        self.limits = limits
        self.reports = reports or LiveReports()
        # The app's, which admits each subscribe: it admits each board after a subscription's
        # first too (``_admit_board``).
        self.admission = admission
        self.hub = Hub(database, Limits(buffer=limits.buffer), pace=self._admit_board)
        self.signals: Signals | None = None
        self._by_key: dict[uuid.UUID | None, set[Connection]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.freezing = Freezing() if limits.freeze_connections else None
        self.introductions = Introductions(
            limits.unintroduced_per_address, limits.unintroduced_per_process
        )

    async def _admit_board(self, caller: Scope) -> float | None:
        """Admits a board after a subscription's first under its key's and tenant's rate
        limits, one unit as a request: that board runs the subscription's document again (its
        steps' deals read afresh), and a key's dashboards would otherwise run as many of those
        per change as it holds subscriptions. Refused: the seconds after which to ask again, the
        subscription waiting meanwhile (no error, nothing closed) and then taking the newest."""
        try:
            await self.admission.admit(caller, _unrecorded)
        except RateLimited as refused:
            return refused.retry_after_seconds
        except Unavailable as unavailable:
            # The limits cannot be checked and fail closed: as refused, asked again later.
            return unavailable.retry_after_seconds or 1
        return None

    async def start(self, notifications: Notifications) -> None:
        self.signals = Signals(
            notifications,
            self.hub.announce,
            self._key_changed,
            poll_seconds=self.limits.poll_seconds,
        )
        await self.signals.start()
        self.spawn(self._give_up_unread())
        if self.freezing is not None:
            self.spawn(self._freeze_now_and_then(self.freezing))

    async def _give_up_unread(self) -> None:
        """Closes, every second, the connections whose write has waited past the write timeout:
        their client no longer reads (its socket is full), and would hold its slot for ever."""
        loop = asyncio.get_running_loop()
        limit = self.limits.write_timeout_seconds
        while True:
            await asyncio.sleep(_UNREAD_CHECK_SECONDS)
            now = loop.time()
            for connections in list(self._by_key.values()):
                for connection in list(connections):
                    since = connection.writing_since
                    if since is not None and now - since >= limit:
                        connection.write_timed_out()

    async def _freeze_now_and_then(self, freezing: Freezing) -> None:
        while True:
            await asyncio.sleep(freezing.settle_seconds)
            started = time.monotonic()
            done = freezing.tick(started, self.connection_count())
            if done is not None:
                log.info(
                    "live_objects_frozen",
                    how=done,
                    frozen=gc.get_freeze_count(),
                    connections=self.connection_count(),
                    pause_ms=round((time.monotonic() - started) * 1000, 1),
                )

    def shut_down(self) -> None:
        """Tells every client to reconnect elsewhere (the server is stopping); new connections
        are refused from now on."""
        self.stopping = True
        self.hub.end_all(Ending.SHUTDOWN)
        for connections in list(self._by_key.values()):
            for connection in list(connections):
                connection.close(SHUTDOWN)

    async def stop(self) -> None:
        self.shut_down()
        await self.hub.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.signals is not None:
            await self.signals.stop()

    def connection_count(self) -> int:
        return sum(len(connections) for connections in self._by_key.values())

    def register(self, connection: Connection) -> None:
        if self.stopping:
            raise ServerStopping("The server is stopping: connect again.", retry_after_seconds=1)
        same_key = self._by_key.setdefault(connection.scope.key_id, set())
        if len(same_key) >= self.limits.connections_per_key:
            raise TooManyConnections(
                f"This key holds {len(same_key)} live connections to this server, its limit.",
                retry_after_seconds=10,
            )
        same_key.add(connection)
        self.reports.opened(connection.transport)
        if self.freezing is not None:
            self.freezing.opened(time.monotonic())

    def unregister(self, connection: Connection) -> None:
        same_key = self._by_key.get(connection.scope.key_id)
        if same_key is None or connection not in same_key:
            return
        same_key.discard(connection)
        if not same_key:
            del self._by_key[connection.scope.key_id]
        why = connection.closing.name if connection.closing else "client"
        self.reports.closed(connection.transport, why)
        if self.freezing is not None:
            self.freezing.closed()
        scope = connection.scope
        log.info(
            "live_connection_closed",
            transport=connection.transport,
            reason=why,
            seconds=round(time.monotonic() - connection.opened_at, 3),
            tenant_id=str(scope.tenant_id),
            department_id=None if scope.department_id is None else str(scope.department_id),
            key_id=None if scope.key_id is None else str(scope.key_id),
        )

    def _key_changed(self, payload: str) -> None:
        """A key or a tenant changed: its connections are checked against the database now."""
        tenant = payload.removeprefix(TENANT_NOTICE_PREFIX)
        try:
            changed = uuid.UUID(tenant)
        except ValueError:
            affected = [c for connections in self._by_key.values() for c in connections]
        else:
            if tenant != payload:
                affected = [
                    c
                    for connections in self._by_key.values()
                    for c in connections
                    if c.scope.tenant_id == changed
                ]
            else:
                affected = list(self._by_key.get(changed, ()))
        for connection in affected:
            self.spawn(self._check(connection))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` beside the connections; ``stop`` cancels what is left of it."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(self, connection: Connection) -> None:
        try:
            await still_admitted(self.database, *connection.credentials)
        except DomainError:
            connection.close(REVOKED)
        except Exception:
            # Unsure (the database did not answer): the connection stays until the next notice.
            log.exception("live_key_check_failed", key_id=str(connection.scope.key_id))

    def context_for(self, connection: Connection) -> LiveContext:
        return LiveContext(
            request_id=uuid.uuid4().hex,
            caller=connection.scope,
            database=self.database,
            hub=self.hub,
            on_ended=connection.ended,
        )
