"""Subscriptions on the wire: ``graphql-transport-ws`` over a WebSocket at ``/graphql``, and
``graphql-sse`` (its distinct connections mode: one subscription per request) at
``/graphql/stream``, for networks whose proxies refuse WebSockets.

Both authenticate like a GraphQL request (``edge.live_callers``), run the operation through the
same schema (its guards and error codes), and keep the limits of ``LiveLimits``: connections per
key (per server process), WebSockets not yet introduced (per client address and per process),
subscriptions per WebSocket, the time a WebSocket may take to introduce itself, stay without a
subscription, or leave a ping unanswered, and the time a write may wait for a client that does
not read. Each operation is admitted by the key's rate limits, as a request is. The hub ends a
subscription whose client reads too slowly, and the server stopping ends them all; a key's
revocation or its tenant's suspension (heard on the key channel), or its expiry (checked at each
keep-alive), closes its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
import strawberry
import structlog
from fastapi import FastAPI, Request
from graphql import GraphQLError, execute_subscription_event
from starlette.requests import HTTPConnection
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.types import ExecutionResult
from strawberry.types.execution import PreExecutionError

from dealbase.config import Settings
from dealbase.edge.live_callers import live_scope, still_admitted
from dealbase.edge.problems import (
    PROBLEM_MEDIA_TYPE,
    ProtocolError,
    malformed_json,
    problem_document,
)
from dealbase.edge.request_edge import MAX_BODY_BYTES
from dealbase.errors import DomainError, RateLimited, Unavailable
from dealbase.graphql_api.documents import DocumentCache
from dealbase.graphql_api.errors import mapped_error
from dealbase.graphql_api.introductions import Introductions
from dealbase.graphql_api.live_execution import sharing_results
from dealbase.graphql_api.subscriptions import LiveContext, change_of
from dealbase.platform.events.models import Event
from dealbase.platform.live.hub import Ended, Ending, Hub, Limits, Subscriber
from dealbase.platform.live.signals import Signals
from dealbase.tenancy.callers.api_keys import TENANT_NOTICE_PREFIX
from dealbase.tenancy.callers.authentication import Authenticator
from dealbase.tenancy.database.connections import Database
from dealbase.tenancy.rate_limits.admission import Admission
from dealbase.tenancy.rate_limits.failure_allowance import client_address
from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Scope

log = structlog.get_logger(__name__)
# How long a stream whose client went away waits for its operation to end.
_OPERATION_END_SECONDS = 5.0
# How often writes that wait are looked at: a connection is closed at most this long after its
# write timeout.
_UNREAD_CHECK_SECONDS = 1.0
# How long a WebSocket's close frame may wait to be written (a client that does not read).
_CLOSE_SECONDS = 1.0

WEBSOCKET_PATH = "/graphql"
STREAM_PATH = "/graphql/stream"
PROTOCOL = "graphql-transport-ws"
SSE_MEDIA_TYPE = "text/event-stream"
# A WebSocket message may be as large as a GraphQL request's body (RequestEdge's cap).
MAX_MESSAGE_BYTES = MAX_BODY_BYTES


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


@dataclass(frozen=True, slots=True)
class Closing:
    """Why the server closes a live connection: a WebSocket close code, and the reason (at most
    123 bytes, a WebSocket's limit), which the stream's last event carries too."""

    code: int
    name: str
    reason: str


# Codes 4400-4499 are graphql-transport-ws' own (clients do not reconnect after them); 1012 and
# 1013 are WebSocket's "restart" and "try again later", after which clients reconnect.
SHUTDOWN = Closing(1012, "shutdown", "Server restarting: reconnect and resume after your cursor")
SLOW_CONSUMER = Closing(
    1013, "slow_consumer", "Slow consumer: too many events waited; resume after your cursor"
)
IDLE = Closing(1000, "idle", "No subscription for too long")
WRITE_TIMEOUT = Closing(1013, "write_timeout", "Not read: the server could not write for too long")
NO_PONG = Closing(1001, "no_pong", "No pong to the server's ping")
INIT_TIMEOUT = Closing(4408, "init_timeout", "Connection initialisation timeout")
TOO_MANY_CONNECTIONS = Closing(4429, "too_many_connections", "Too many connections for this key")
UNAUTHORIZED = Closing(4401, "unauthorized", "Unauthorized")
INTERNAL_ERROR = Closing(1011, "internal_error", "Internal error")
REVOKED = Closing(4403, "revoked", "Forbidden: the key no longer admits this connection")
BAD_REQUEST = Closing(4400, "bad_request", "Bad request")
TOO_BIG = Closing(1009, "too_big", "Message too big")
SUBPROTOCOL = Closing(4406, "subprotocol", "Subprotocol not acceptable")

_ENDINGS = {Ending.SHUTDOWN: SHUTDOWN, Ending.SLOW_CONSUMER: SLOW_CONSUMER}


@dataclass
class LiveReports:
    """What the transports report (to the metrics, ``ops.live_metrics``)."""

    opened: Callable[[str], None] = lambda transport: None
    closed: Callable[[str, str], None] = lambda transport, why: None
    sent: Callable[[str], None] = lambda transport: None


class TooManyConnections(RateLimited):
    code = "too_many_connections"


class ServerStopping(Unavailable):
    pass


def _refusal(error: DomainError) -> Closing:
    """How a WebSocket is refused for ``error``: what may pass with time (a rate limit, a
    server stopping) with a code after which clients come back; a key refused, for good."""
    if isinstance(error, TooManyConnections):
        return TOO_MANY_CONNECTIONS
    if isinstance(error, ServerStopping):
        return SHUTDOWN
    if isinstance(error, RateLimited | Unavailable):
        return Closing(1013, error.code, f"Try again later: {error.code}")
    return Closing(4403, error.code, f"Forbidden: {error.code}")


class _Connection:
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
        self.close(_ENDINGS[why])

    def write_timed_out(self) -> None:
        self.close(WRITE_TIMEOUT)


class Freezing:
    """Live connections' objects moved into the garbage collector's permanent generation once
    they have settled, as the app's own are at startup (``app``).

    A full collection visits every tracked object not frozen, with the event loop stopped: a
    worker holding 500 subscriptions holds about 150,000 objects (their tasks, streams,
    executors, contexts), and its full collections took 200 to 450 ms on the bench machine
    (bench/README.md, "live.py"): every subscriber's next change waited that long. Once
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


class LiveService:
    """A server process's live connections, its hub and its LISTEN connection."""

    def __init__(
        self,
        database: Database,
        schema: strawberry.Schema,
        limits: LiveLimits,
        reports: LiveReports | None = None,
    ) -> None:
        self.database = database
        # Each change's results executed once for the subscribers that share a document.
        schema.execution_context_class = sharing_results(schema.execution_context_class)
        self.schema = schema
        self.limits = limits
        self.reports = reports or LiveReports()
        self.hub = Hub(database, Limits(buffer=limits.buffer))
        self.signals: Signals | None = None
        self._by_key: dict[uuid.UUID | None, set[_Connection]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.freezing = Freezing() if limits.freeze_connections else None
        self.introductions = Introductions(
            limits.unintroduced_per_address, limits.unintroduced_per_process
        )

    async def start(self, listen_url: str) -> None:
        self.signals = Signals(
            listen_url, self.hub.announce, self._key_changed, poll_seconds=self.limits.poll_seconds
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

    def _register(self, connection: _Connection) -> None:
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

    def _unregister(self, connection: _Connection) -> None:
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

    async def _check(self, connection: _Connection) -> None:
        try:
            await still_admitted(self.database, *connection.credentials)
        except DomainError:
            connection.close(REVOKED)
        except Exception:
            # Unsure (the database did not answer): the connection stays until the next notice.
            log.exception("live_key_check_failed", key_id=str(connection.scope.key_id))

    def _context(self, connection: _Connection) -> LiveContext:
        return LiveContext(
            request_id=uuid.uuid4().hex,
            caller=connection.scope,
            database=self.database,
            hub=self.hub,
            on_ended=connection.ended,
        )


def _errors(errors: list[GraphQLError] | None, request_id: str) -> list[Any]:
    """Each error with its code, as a GraphQL response over HTTP shows it."""
    return [mapped_error(error, request_id).formatted for error in errors or []]


def _formatted(result: ExecutionResult, request_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = {"data": result.data}
    if result.errors:
        shown["errors"] = _errors(result.errors, request_id)
    if result.extensions:
        shown["extensions"] = result.extensions
    return shown


def _extensions_of(schema: strawberry.Schema, request: _Operation) -> str | None:
    """What Strawberry puts in each result's ``extensions`` for this operation, as JSON: the
    cost its document guard estimated (``documents.DocumentGuard.get_results``), found in the
    schema's documents, where the guard has just left the document; None when it is not there
    (a cache of no documents), and the results then come through Strawberry."""
    documents: DocumentCache | None = getattr(schema, "documents", None)
    checked = documents.get(request.query) if documents is not None else None
    if documents is None or checked is None:
        return None
    estimate = checked.cost.estimate(request.variables)
    cost = {"cost": {"estimated": estimate, "budget": documents.guards.max_cost}}
    return orjson.dumps(cost).decode()


def _credential(payload: Mapping[str, Any], headers: Mapping[str, str], name: str) -> str | None:
    """A credential of connection_init's payload, its name in any case, else of the upgrade
    request's headers; without the white space around it, as a request's header value."""
    for key, value in payload.items():
        if key.lower() == name and isinstance(value, str):
            return value.strip(" \t")
    given = headers.get(name)
    return None if given is None else given.strip(" \t")


class _WebSocketConnection(_Connection):
    transport = "websocket"

    def __init__(
        self,
        service: LiveService,
        websocket: WebSocket,
        scope: Scope,
        credentials: tuple[str, str | None],
    ):
        super().__init__(service, websocket, scope, credentials)
        self.websocket = websocket
        self.operations: dict[str, asyncio.Task[None]] = {}
        self._sending = asyncio.Lock()
        self._replies: set[asyncio.Task[None]] = set()
        # The loop's clock, which its waits below keep (a test's loop may keep a fake one).
        self._loop = asyncio.get_running_loop()
        self.idle_since: float | None = self._loop.time()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_text(orjson.dumps(message).decode())

    async def send_text(self, text: str) -> None:
        async with self._sending:
            self.writing_since = self._loop.time()
            try:
                await self.websocket.send_text(text)
            finally:
                self.writing_since = None

    def _send_soon(self, message: dict[str, Any]) -> None:
        """Sends ``message`` beside the connection's loop, which must not wait for a client
        that does not read (behind a subscription's result that fills its socket): it is there
        to close that client."""
        task = asyncio.get_running_loop().create_task(self._send_quietly(message))
        self._replies.add(task)
        task.add_done_callback(self._replies.discard)

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        # A send after the client went away fails; the connection's loop hears of it anyway.
        with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
            await self.send(message)

    async def serve(self) -> None:
        """The connection after its acknowledgement: client messages, pings and the idle
        timeout, until a side closes it."""
        limits = self.service.limits
        receiving: asyncio.Future[Any] | None = None
        closed: asyncio.Future[Any] = asyncio.ensure_future(self.closed.wait())
        pinged_at: float | None = None
        next_ping = self._loop.time() + limits.keepalive_seconds
        try:
            while self.closing is None:
                if receiving is None:
                    receiving = asyncio.ensure_future(self.websocket.receive())
                now = self._loop.time()
                deadlines = [next_ping]
                if pinged_at is not None:
                    deadlines.append(pinged_at + limits.keepalive_seconds)
                if self.idle_since is not None and not self.operations:
                    deadlines.append(self.idle_since + limits.idle_timeout_seconds)
                timeout = max(0.0, min(deadlines) - now)
                done, _ = await asyncio.wait(
                    {receiving, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                now = self._loop.time()
                if receiving in done:
                    message = receiving.result()
                    receiving = None
                    if message["type"] == "websocket.disconnect":
                        return
                    pinged_at = None
                    await self._received(message)
                    continue
                if closed in done:
                    break
                if pinged_at is not None and now >= pinged_at + limits.keepalive_seconds:
                    self.close(NO_PONG)
                elif (
                    self.idle_since is not None
                    and not self.operations
                    and now >= self.idle_since + limits.idle_timeout_seconds
                ):
                    self.close(IDLE)
                elif now >= next_ping:
                    self.recheck()
                    self._send_soon({"type": "ping"})
                    pinged_at = now if pinged_at is None else pinged_at
                    next_ping = now + limits.keepalive_seconds
        finally:
            closed.cancel()
            if receiving is not None:
                receiving.cancel()
            # Whatever cancels the connection, its subscriptions leave the hub and give their
            # connections back first.
            for reply in list(self._replies):
                reply.cancel()
            with anyio.CancelScope(shield=True):
                await self._end_operations()
            if self.closing is not None:
                with contextlib.suppress(Exception), anyio.move_on_after(_CLOSE_SECONDS):
                    await self.websocket.close(self.closing.code, self.closing.reason)

    async def _received(self, message: Mapping[str, Any]) -> None:
        text = message.get("text")
        if len(text if text is not None else message.get("bytes") or b"") > MAX_MESSAGE_BYTES:
            self.close(TOO_BIG)
            return
        try:
            parsed = orjson.loads(text if text is not None else message.get("bytes") or b"")
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("type"), str):
            self.close(BAD_REQUEST)
            return
        kind = parsed["type"]
        if kind == "ping":
            self._send_soon({"type": "pong"})
        elif kind == "pong":
            pass
        elif kind == "connection_init":
            self.close(Closing(4429, "init_twice", "Too many initialisation requests"))
        elif kind == "subscribe":
            await self._subscribe(parsed)
        elif kind == "complete":
            operation = self.operations.pop(str(parsed.get("id")), None)
            if operation is not None:
                operation.cancel()
                self._note_idle()
        else:
            self.close(BAD_REQUEST)

    async def _subscribe(self, message: Mapping[str, Any]) -> None:
        operation_id = message.get("id")
        payload = message.get("payload")
        if not isinstance(operation_id, str) or not isinstance(payload, dict):
            self.close(BAD_REQUEST)
            return
        if operation_id in self.operations:
            self.close(Closing(4409, "duplicate_id", f"Subscriber for {operation_id[:80]} exists"))
            return
        limit = self.service.limits.subscriptions_per_connection
        if len(self.operations) >= limit:
            self._send_soon(
                {
                    "id": operation_id,
                    "type": "error",
                    "payload": [
                        {
                            "message": f"This connection holds {limit} subscriptions, its limit.",
                            "extensions": {"code": "too_many_subscriptions"},
                        }
                    ],
                }
            )
            return
        self.idle_since = None
        task = asyncio.get_running_loop().create_task(self._operation(operation_id, payload))
        self.operations[operation_id] = task

    async def _operation(self, operation_id: str, payload: Mapping[str, Any]) -> None:
        context = self.service._context(self)
        try:
            request = _operation_of(payload)
            # Each operation is a request, under the key's and the tenant's rate limits as
            # one over HTTP is: a socket held open does not run operations for free.
            await self.admission.admit(self.scope, _unrecorded)
        except (ProtocolError, DomainError) as exc:
            coded: dict[str, Any] = {"code": exc.code}
            if isinstance(exc, RateLimited | Unavailable):
                coded["retry_after_seconds"] = exc.retry_after_seconds
            error = {"message": exc.detail, "extensions": coded}
            await self.send({"id": operation_id, "type": "error", "payload": [error]})
            self._finished(operation_id)
            return
        handed: asyncio.Future[tuple[Subscriber, str]] = asyncio.get_running_loop().create_future()
        context.direct = lambda subscriber: self._take(handed, request, context, subscriber)
        results = await self.service.schema.subscribe(
            request.query,
            variable_values=request.variables,
            context_value=context,
            operation_name=request.operation_name,
        )
        # Strawberry's stream: it checks the document, runs the subscription's field, and
        # yields each result; or, when this connection took the subscriber (a ``changes``
        # field), it only waits for the subscription's end while ``_direct`` sends the events.
        first: asyncio.Future[Any] = asyncio.ensure_future(anext(results))
        try:
            await asyncio.wait({first, handed}, return_when=asyncio.FIRST_COMPLETED)
            if handed.done():
                subscriber, extensions = handed.result()
                await self._direct(operation_id, subscriber, context, extensions)
            await self._stream(operation_id, results, context, first)
        except (WebSocketDisconnect, OSError):
            pass
        except Exception:
            log.exception("live_operation_failed", request_id=context.request_id)
            self.close(INTERNAL_ERROR)
        finally:
            with anyio.CancelScope(shield=True):
                if not first.done():
                    first.cancel()
                await asyncio.gather(first, return_exceptions=True)
                await results.aclose()
                await context.finish()
            self._finished(operation_id)

    def _take(
        self,
        handed: asyncio.Future[tuple[Subscriber, str]],
        request: _Operation,
        context: LiveContext,
        subscriber: Subscriber,
    ) -> bool:
        """Takes a ``changes`` subscriber whose events this connection can render itself: its
        executor is known, and so is what Strawberry would put in each result's extensions."""
        extensions = _extensions_of(self.service.schema, request)
        if handed.done() or context.executor is None or extensions is None:
            return False
        handed.set_result((subscriber, extensions))
        return True

    async def _direct(
        self, operation_id: str, subscriber: Subscriber, context: LiveContext, extensions: str
    ) -> None:
        """The subscriber's events as ``next`` messages, each result executed once for every
        subscriber of the same document (``live_execution``) and encoded once too: what is
        left per subscriber is its message's frame. Returns when the hub ends the subscription.
        """
        executor = context.executor
        head = '{"id":' + orjson.dumps(operation_id).decode() + ',"type":"next","payload":{"data":'
        tail = ',"extensions":' + extensions + "}}"
        while True:
            try:
                item = await subscriber.next()
            except Ended:
                return
            if not isinstance(item, Event):
                continue
            change = change_of(item)
            data = executor.encoded(change)
            if data is None:
                executed: Any = execute_subscription_event(
                    executor.build_per_event_executor(change)
                )
                result: Any = await executed if executor.is_awaitable(executed) else executed
                if not result.errors:
                    data = orjson.dumps(result.data).decode()
                    executor.keep(change, data)
            if data is not None:
                text = head + data + tail
            else:
                # Errors carry this operation's request id: its own message, not a shared one.
                shown = _formatted(result, context.request_id)
                shown["extensions"] = orjson.loads(extensions)
                text = orjson.dumps({"id": operation_id, "type": "next", "payload": shown}).decode()
            self.service.reports.sent(self.transport)
            await self.send_text(text)
            if context.loaders:
                context.loaders.clear()
            if context.reading:
                await context.close()

    async def _stream(
        self,
        operation_id: str,
        results: AsyncGenerator[Any, None],
        context: LiveContext,
        first: asyncio.Future[Any],
    ) -> None:
        """The operation's results (the first already asked for) as ``next`` messages, then
        ``complete`` (unless the connection is closing: its close says why)."""
        try:
            result = await first
        except StopAsyncIteration:
            pass
        else:
            if not await self._result(operation_id, result, context):
                return
            async for result in results:
                if not await self._result(operation_id, result, context):
                    return
        if self.closing is None:
            await self.send({"id": operation_id, "type": "complete"})

    async def _result(self, operation_id: str, result: Any, context: LiveContext) -> bool:
        """Sends one result; False after an error that ends the operation."""
        if isinstance(result, PreExecutionError):
            errors = _errors(result.errors, context.request_id)
            await self.send({"id": operation_id, "type": "error", "payload": errors})
            return False
        payload = _formatted(result, context.request_id)
        self.service.reports.sent(self.transport)
        await self.send({"id": operation_id, "type": "next", "payload": payload})
        # Each result reads afresh: no loader's answer outlives it, no transaction
        # stays open while the subscription waits.
        context.loaders.clear()
        await context.close()
        return True

    def _finished(self, operation_id: str) -> None:
        if self.operations.get(operation_id) is asyncio.current_task():
            del self.operations[operation_id]
            self._note_idle()

    def _note_idle(self) -> None:
        if not self.operations:
            self.idle_since = self._loop.time()

    async def _end_operations(self) -> None:
        operations = list(self.operations.values())
        self.operations.clear()
        for operation in operations:
            operation.cancel()
        await asyncio.gather(*operations, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class _Operation:
    query: str
    variables: dict[str, Any] | None
    operation_name: str | None


def _unrecorded(verdict: Verdict) -> None:
    """An operation's verdict goes nowhere: a WebSocket message has no headers to carry it."""


def _operation_of(payload: Mapping[str, Any]) -> _Operation:
    query = payload.get("query")
    variables = payload.get("variables")
    name = payload.get("operationName")
    if not isinstance(query, str):
        raise ProtocolError(400, "unreadable_request", "Unreadable request", "No query given.")
    if variables is not None and not isinstance(variables, dict):
        raise ProtocolError(
            400, "unreadable_request", "Unreadable request", "The variables are not an object."
        )
    if name is not None and not isinstance(name, str):
        raise ProtocolError(
            400, "unreadable_request", "Unreadable request", "The operationName is not a string."
        )
    return _Operation(query, variables, name)


async def _close(websocket: WebSocket, why: Closing) -> None:
    """Closes ``websocket`` with ``why``, giving up after ``_CLOSE_SECONDS``: a client that does
    not read would otherwise hold the close, and the connection's place, for ever."""
    with contextlib.suppress(Exception), anyio.move_on_after(_CLOSE_SECONDS):
        await websocket.close(why.code, why.reason)


async def _introduction(websocket: WebSocket, service: LiveService) -> dict[str, Any] | None:
    """The client's ``connection_init``, its first message other than a ping or a pong (which
    are answered), read within the init timeout; None once the connection is closed (gone, too
    big, too late, or another message first)."""
    try:
        async with asyncio.timeout(service.limits.init_timeout_seconds):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return None
                raw = message.get("text") or message.get("bytes") or b""
                if len(raw) > MAX_MESSAGE_BYTES:
                    await _close(websocket, TOO_BIG)
                    return None
                try:
                    init = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    init = None
                kind = init.get("type") if isinstance(init, dict) else None
                if kind == "connection_init":
                    introduced: dict[str, Any] = init
                    return introduced
                if kind not in ("ping", "pong"):
                    await _close(websocket, UNAUTHORIZED)
                    return None
                # The protocol allows pings and pongs at any time, before the introduction too.
                if kind == "ping":
                    await websocket.send_text('{"type":"pong"}')
    except TimeoutError:
        await _close(websocket, INIT_TIMEOUT)
        return None


async def _refuse_upgrade(websocket: WebSocket, service: LiveService) -> None:
    """Refuses the WebSocket before it opens: 429, as a problem, where the server lets the app
    answer the upgrade request (else it answers 403)."""
    if "websocket.http.response" not in websocket.scope.get("extensions", {}):
        await websocket.close(TOO_MANY_CONNECTIONS.code, TOO_MANY_CONNECTIONS.reason)
        return
    limit = service.introductions.per_address
    document = problem_document(
        429,
        TooManyConnections.code,
        "Too many connections",
        f"Too many WebSockets of this client address (at most {limit}, or of this server)"
        " have not sent connection_init yet.",
        uuid.uuid4().hex,
    )
    refusal = Response(
        orjson.dumps(document), 429, headers={"Retry-After": "1"}, media_type=PROBLEM_MEDIA_TYPE
    )
    await websocket.send_denial_response(refusal)


async def graphql_websocket(websocket: WebSocket) -> None:
    """``graphql-transport-ws`` at /graphql: ``connection_init`` (its payload may carry
    ``X-Api-Key`` and ``X-Department-Id``, else the upgrade request's headers do), then
    ``subscribe`` and ``complete`` per operation."""
    service: LiveService = websocket.app.state.live
    if PROTOCOL not in websocket.scope.get("subprotocols", []):
        await websocket.accept()
        await websocket.close(SUBPROTOCOL.code, SUBPROTOCOL.reason)
        return
    address = client_address(websocket.client.host if websocket.client else None) or ""
    if not service.introductions.enter(address):
        await _refuse_upgrade(websocket, service)
        return
    try:
        await websocket.accept(subprotocol=PROTOCOL)
        init = await _introduction(websocket, service)
    finally:
        service.introductions.leave(address)
    if init is None:
        return
    given = init.get("payload")
    payload = given if isinstance(given, dict) else {}
    api_key = _credential(payload, websocket.headers, "x-api-key")
    department = _credential(payload, websocket.headers, "x-department-id")
    try:
        scope = await live_scope(websocket, api_key, department)
        credentials = (api_key or "", department)
        connection = _WebSocketConnection(service, websocket, scope, credentials)
        service._register(connection)
    except DomainError as exc:
        refusal = _refusal(exc)
        await _close(websocket, refusal)
        return
    try:
        await connection.send({"type": "connection_ack"})
        await connection.serve()
    except (WebSocketDisconnect, OSError):
        # The client went away (uvicorn raises an OSError on a send after that).
        pass
    finally:
        service._unregister(connection)


class _StreamConnection(_Connection):
    transport = "sse"
    # The task answering the stream's request, while it does.
    response: asyncio.Task[Any] | None = None

    def write_timed_out(self) -> None:
        super().write_timed_out()
        # Its stream waits in a write: nothing else would end it.
        if self.response is not None:
            self.response.cancel()


def _sse(event: str, data: object, event_id: str | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + orjson.dumps(data).decode())
    return ("\n".join(lines) + "\n\n").encode()


async def graphql_stream(request: Request) -> StreamingResponse:
    """``graphql-sse`` in its distinct connections mode: the operation in a POST's JSON body
    (or a GET's query string), its results as ``next`` events, then ``complete``."""
    service: LiveService = request.app.state.live
    if request.method == "GET":
        params = request.query_params
        try:
            variables = orjson.loads(params["variables"]) if "variables" in params else None
        except orjson.JSONDecodeError:
            raise malformed_json("The variables are not valid JSON.") from None
        body: Any = {
            "query": params.get("query"),
            "variables": variables,
            "operationName": params.get("operationName"),
        }
    else:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise malformed_json(f"The body is not valid JSON: {exc}.") from None
        if not isinstance(body, dict):
            raise ProtocolError(400, "unreadable_request", "Unreadable request", "Not an object.")
    operation = _operation_of(body)
    headers = request.headers
    api_key, department = headers.get("x-api-key"), headers.get("x-department-id")
    scope = await live_scope(request, api_key, department)
    connection = _StreamConnection(service, request, scope, (api_key or "", department))
    service._register(connection)
    return _LiveStreamResponse(
        service,
        connection,
        _stream(service, connection, operation),
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _LiveStreamResponse(StreamingResponse):
    """A stream whose connection leaves the service however the response ends: a client gone
    before its first byte never runs the stream's own cleanup."""

    def __init__(
        self, service: LiveService, connection: _StreamConnection, *args: Any, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._service = service
        self._connection = connection

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        connection = self._connection
        task = connection.response = asyncio.current_task()
        loop = asyncio.get_running_loop()

        async def watched(message: Any) -> None:
            connection.writing_since = loop.time()
            try:
                await send(message)
            finally:
                connection.writing_since = None

        try:
            await super().__call__(scope, receive, watched)
        except asyncio.CancelledError:
            # Given up for a client that stopped reading (``write_timed_out``): the server
            # closes the connection; another cancellation goes on.
            if connection.closing is not WRITE_TIMEOUT or task is None or task.uncancel():
                raise
        finally:
            connection.response = None
            self._service._unregister(self._connection)


async def _stream(
    service: LiveService, connection: _StreamConnection, operation: _Operation
) -> AsyncIterator[bytes]:
    outgoing: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)
    context = service._context(connection)

    async def run() -> None:
        results = await service.schema.subscribe(
            operation.query,
            variable_values=operation.variables,
            context_value=context,
            operation_name=operation.operation_name,
        )
        try:
            async for result in results:
                if isinstance(result, PreExecutionError):
                    await outgoing.put(_sse("next", _formatted(result, context.request_id)))
                    break
                data = result.data or {}
                field = next(iter(data.values()), None) if len(data) == 1 else None
                cursor = field.get("cursor") if isinstance(field, dict) else None
                shown = _formatted(result, context.request_id)
                await outgoing.put(_sse("next", shown, cursor))
                context.loaders.clear()
                await context.close()
            if connection.closing is None:
                await outgoing.put(_sse("complete", None))
        finally:
            await results.aclose()
            await context.finish()
            # The end, for the stream to read after what is queued; not once the stream
            # cancelled this (its client gone): nothing reads then, and a full queue would hold
            # the put, and the stream waiting for this task, for ever.
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                await outgoing.put(None)

    running = asyncio.get_running_loop().create_task(run())
    closed: asyncio.Future[Any] = asyncio.ensure_future(connection.closed.wait())
    try:
        while connection.closing is None:
            taking = asyncio.ensure_future(outgoing.get())
            done, _ = await asyncio.wait(
                {taking, closed},
                timeout=service.limits.keepalive_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if taking in done:
                item = taking.result()
                if item is None:
                    break
                if item.startswith(b"event: next"):
                    service.reports.sent(connection.transport)
                yield item
                continue
            taking.cancel()
            if closed not in done:
                connection.recheck()
                # A comment line: proxies and clients see the stream alive.
                yield b": keep-alive\n\n"
        why = connection.closing
        if why is not None:
            # The reason as a last result; without `complete` (unless the key may no longer
            # connect), since a client reconnects after a stream that ended without one.
            error = {"message": why.reason, "extensions": {"code": why.name}}
            yield _sse("next", {"errors": [error]})
            if why is REVOKED:
                yield _sse("complete", None)
    finally:
        service._unregister(connection)
        closed.cancel()
        running.cancel()
        # Cancelled (the client went away), the operation still leaves the hub and gives its
        # connection back; the response waits for that, but not for ever (an operation that
        # did not end once cancelled is logged, and the stream ends all the same).
        with anyio.move_on_after(_OPERATION_END_SECONDS, shield=True) as waited:
            await asyncio.gather(running, return_exceptions=True)
        if waited.cancelled_caught:
            log.warning(
                "live_operation_did_not_end",
                request_id=context.request_id,
                seconds=_OPERATION_END_SECONDS,
            )


def install_live(app: FastAPI, service: LiveService) -> None:
    """Mounts both transports; call it before the GraphQL API's routes, whose WebSocket route
    at /graphql this one precedes."""
    app.state.live = service
    app.add_api_websocket_route(WEBSOCKET_PATH, graphql_websocket)
    app.add_api_route(STREAM_PATH, graphql_stream, methods=["GET", "POST"], include_in_schema=False)
