"""``graphql-sse`` (its distinct connections mode: one subscription per request) at
``/graphql/stream``, for networks whose proxies refuse WebSockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
import structlog
from fastapi import Request
from starlette.responses import StreamingResponse
from strawberry.types.execution import PreExecutionError

from dealbase.edge.live_callers import live_scope
from dealbase.edge.problems import (
    ProtocolError,
    malformed_json,
)
from dealbase.graphql_api.live.protocol import (
    REVOKED,
    SSE_MEDIA_TYPE,
    WRITE_TIMEOUT,
    Operation,
    formatted,
    operation_of,
)
from dealbase.graphql_api.live.service import Connection, LiveService
from dealbase.graphql_api.subscriptions import LiveContext

log = structlog.get_logger(__name__)

# How long a stream whose client went away waits for its operation to end.
_OPERATION_END_SECONDS = 5.0


class StreamConnection(Connection):
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
    operation = operation_of(body)
    headers = request.headers
    api_key, department = headers.get("x-api-key"), headers.get("x-department-id")
    scope = await live_scope(request, api_key, department)
    connection = StreamConnection(service, request, scope, (api_key or "", department))
    service.register(connection)
    return LiveStreamResponse(
        service,
        connection,
        _stream(service, connection, operation),
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class LiveStreamResponse(StreamingResponse):
    """A stream whose connection leaves the service however the response ends: a client gone
    before its first byte never runs the stream's own cleanup."""

    def __init__(
        self, service: LiveService, connection: StreamConnection, *args: Any, **kwargs: Any
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
            self._service.unregister(self._connection)


async def _stream(
    service: LiveService, connection: StreamConnection, operation: Operation
) -> AsyncIterator[bytes]:
    outgoing: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)
    context = service.context_for(connection)
    running = asyncio.get_running_loop().create_task(
        _run(service, connection, operation, context, outgoing)
    )
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
        service.unregister(connection)
        closed.cancel()
        running.cancel()
        await _operation_ended(running, context.request_id)


async def _run(
    service: LiveService,
    connection: StreamConnection,
    operation: Operation,
    context: LiveContext,
    outgoing: asyncio.Queue[bytes | None],
) -> None:
    """Runs the stream's operation, its results queued as events for the stream to send."""
    results = await service.schema.subscribe(
        operation.query,
        variable_values=operation.variables,
        context_value=context,
        operation_name=operation.operation_name,
    )
    try:
        async for result in results:
            if isinstance(result, PreExecutionError):
                await outgoing.put(_sse("next", formatted(result, context.request_id)))
                break
            data = result.data or {}
            field = next(iter(data.values()), None) if len(data) == 1 else None
            cursor = field.get("cursor") if isinstance(field, dict) else None
            shown = formatted(result, context.request_id)
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


async def _operation_ended(running: asyncio.Task[None], request_id: str) -> None:
    """Waits for the cancelled operation to end."""
    # Cancelled (the client went away), the operation still leaves the hub and gives its
    # connection back; the response waits for that, but not for ever (an operation that
    # did not end once cancelled is logged, and the stream ends all the same).
    with anyio.move_on_after(_OPERATION_END_SECONDS, shield=True) as waited:
        await asyncio.gather(running, return_exceptions=True)
    if waited.cancelled_caught:
        log.warning(
            "live_operation_did_not_end",
            request_id=request_id,
            seconds=_OPERATION_END_SECONDS,
        )
