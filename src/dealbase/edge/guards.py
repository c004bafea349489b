"""Guards on every HTTP request (REST and GraphQL) before any route reads it: one value per
single-valued header, and a cap on the body."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbase.edge.problems import problem

MAX_BODY_BYTES = 1024 * 1024


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
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
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(
            Request(scope),
            413,
            "payload_too_large",
            "Payload too large",
            f"The body exceeds {self.max_bytes} bytes.",
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
