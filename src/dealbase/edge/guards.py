"""Guards on every HTTP request (REST and GraphQL) before any route reads it: one value per
single-valued header, and a cap on the body."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbase.edge.problems import problem

MAX_BODY_BYTES = 1024 * 1024
# A batch (a path ending in /batch) of up to 1,000 records: about 0.5 kB a customer in a typical
# sync, so 8 MiB leaves room for long notes.
MAX_BATCH_BODY_BYTES = 8 * MAX_BODY_BYTES
# A refused body is read to its end, up to this much and this long, before the 413 is sent: a
# client that sends its whole body before reading the answer (urllib; any client with
# Connection: close) would otherwise find its connection reset under the 413, as the server
# closes a socket with unread data. A larger or slower body is cut off.
DRAIN_BYTES = MAX_BATCH_BODY_BYTES
DRAIN_SECONDS = 10.0


class _TooLarge(Exception):
    pass


async def _drain(receive: Receive, read: int) -> None:
    """Reads and drops the rest of a request body, ``read`` bytes of it already read."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            while read <= DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return
                read += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


class BodyLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = MAX_BODY_BYTES,
        batch_max_bytes: int = MAX_BATCH_BODY_BYTES,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.batch_max_bytes = batch_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.batch_max_bytes if scope["path"].endswith("/batch") else self.max_bytes
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > max_bytes:
            # A client that waits for 100 Continue has sent no body: refused before it does.
            if headers.get(b"expect", b"").lower() != b"100-continue" and (
                int(declared) <= DRAIN_BYTES
            ):
                await _drain(receive, 0)
            await self._refuse(scope, receive, send, max_bytes)
            return
        received = 0
        body_ended = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, body_ended
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_ended = not message.get("more_body", False)
                if received > max_bytes:
                    raise _TooLarge
            return message

        async def noting_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, noting_send)
        except _TooLarge:
            if started:
                raise
            if not body_ended:
                # After its last part, a server's receive waits for the client to go.
                await _drain(receive, received)
            await self._refuse(scope, receive, send, max_bytes)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, max_bytes: int) -> None:
        response = problem(
            Request(scope),
            413,
            "payload_too_large",
            "Payload too large",
            f"The body exceeds {max_bytes} bytes.",
        )
        await response(scope, receive, send)


# Headers that carry one value (RFC 9110 5.3): two of them are ambiguous, and a proxy that reads
# the other one than the app would authorise, deduplicate or parse another request.
SINGLE_VALUED = (
    b"x-api-key",
    b"x-department-id",
    b"idempotency-key",
    b"content-type",
    b"content-length",
)


class SingleValuedHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = [name.lower() for name, _ in scope["headers"]]
            repeated = sorted(
                {name for name in names if names.count(name) > 1} & set(SINGLE_VALUED)
            )
            if repeated:
                response = problem(
                    Request(scope),
                    400,
                    "repeated_header",
                    "Repeated header",
                    f"Send each of these headers once: {', '.join(n.decode() for n in repeated)}.",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
