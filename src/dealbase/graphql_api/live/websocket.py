"""``graphql-transport-ws`` over a WebSocket at ``/graphql``."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import anyio
import orjson
import strawberry
import structlog
from graphql import execute_subscription_event
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.types.execution import PreExecutionError

from dealbase.edge.live_callers import live_scope
from dealbase.edge.problems import (
    PROBLEM_MEDIA_TYPE,
    ProtocolError,
    problem_document,
)
from dealbase.errors import DomainError, RateLimited, Unavailable
from dealbase.graphql_api.documents import DocumentCache
from dealbase.graphql_api.live.protocol import (
    BAD_REQUEST,
    IDLE,
    INIT_TIMEOUT,
    INTERNAL_ERROR,
    MAX_MESSAGE_BYTES,
    NO_PONG,
    PROTOCOL,
    SHUTDOWN,
    SUBPROTOCOL,
    TOO_BIG,
    TOO_MANY_CONNECTIONS,
    UNAUTHORIZED,
    Closing,
    Operation,
    ServerStopping,
    TooManyConnections,
    formatted,
    formatted_errors,
    operation_of,
)
from dealbase.graphql_api.live.service import Connection, LiveLimits, LiveService
from dealbase.graphql_api.subscriptions import LiveContext, change_of
from dealbase.platform.events.models import Event
from dealbase.platform.live.hub import Ended, Subscriber
from dealbase.tenancy.rate_limits.failure_allowance import client_address
from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Scope

log = structlog.get_logger(__name__)

# How long a WebSocket's close frame may wait to be written (a client that does not read).
_CLOSE_SECONDS = 1.0


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


def _extensions_of(schema: strawberry.Schema, request: Operation) -> str | None:
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


class WebSocketConnection(Connection):
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
                timeout = self._quiet_for(limits, next_ping, pinged_at)
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
                if not self._closed_for_silence(limits, now, pinged_at) and now >= next_ping:
                    self.recheck()
                    self._send_soon({"type": "ping"})
                    pinged_at = now if pinged_at is None else pinged_at
                    next_ping = now + limits.keepalive_seconds
        finally:
            await self._ended(closed, receiving)

    def _quiet_for(self, limits: LiveLimits, next_ping: float, pinged_at: float | None) -> float:
        """How long the connection may wait for a message before its next ping, its pong's
        deadline or its idle timeout."""
        deadlines = [next_ping]
        if pinged_at is not None:
            deadlines.append(pinged_at + limits.keepalive_seconds)
        if self.idle_since is not None and not self.operations:
            deadlines.append(self.idle_since + limits.idle_timeout_seconds)
        return max(0.0, min(deadlines) - self._loop.time())

    def _closed_for_silence(self, limits: LiveLimits, now: float, pinged_at: float | None) -> bool:
        """Closes the connection of a client that did not answer a ping in time, or that held
        no subscription for the idle timeout; whether it did."""
        if pinged_at is not None and now >= pinged_at + limits.keepalive_seconds:
            self.close(NO_PONG)
        elif (
            self.idle_since is not None
            and not self.operations
            and now >= self.idle_since + limits.idle_timeout_seconds
        ):
            self.close(IDLE)
        else:
            return False
        return True

    async def _ended(
        self, closed: asyncio.Future[Any], receiving: asyncio.Future[Any] | None
    ) -> None:
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
        context = self.service.context_for(self)
        try:
            request = operation_of(payload)
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
        request: Operation,
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
        subscriber of the same document (``live.execution``) and encoded once too: what is
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
                shown = formatted(result, context.request_id)
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
            errors = formatted_errors(result.errors, context.request_id)
            await self.send({"id": operation_id, "type": "error", "payload": errors})
            return False
        payload = formatted(result, context.request_id)
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


def _unrecorded(verdict: Verdict) -> None:
    """An operation's verdict goes nowhere: a WebSocket message has no headers to carry it."""


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
        connection = WebSocketConnection(service, websocket, scope, credentials)
        service.register(connection)
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
        service.unregister(connection)
