"""What a browser page of an allowed origin (``DEALBASE_CORS_ORIGINS``) may send and read: the
API's methods, its request headers, and the response headers a client of it needs."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbase.edge.problems import problem

CORS_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
CORS_REQUEST_HEADERS = [
    "Content-Type",
    "X-Api-Key",
    "X-Department-Id",
    "X-Request-Id",
    "If-Match",
    "If-None-Match",
    "Idempotency-Key",
]
CORS_RESPONSE_HEADERS = [
    "ETag",
    "Location",
    "RateLimit",
    "RateLimit-Policy",
    "Retry-After",
    "X-Request-Id",
    "Idempotent-Replayed",
]
# How long a browser may keep a preflight's answer.
CORS_MAX_AGE_SECONDS = 600


class ProblemPreflights:
    """Starlette's CORS middleware refuses a preflight (an origin, a method or a header not
    allowed) with a plain-text 400; this layer, around it, answers that refusal as every other
    refusal of the API is answered: a problem, ``cors_refused``, with the same status and the
    CORS headers the middleware chose."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            await self.app(scope, receive, send)
            return
        refusal: Message | None = None

        async def answer(message: Message) -> None:
            nonlocal refusal
            if message["type"] == "http.response.start" and message["status"] == 400:
                refusal = message
                return
            if refusal is None:
                await send(message)
                return
            # Starlette's text names what was not allowed ("Disallowed CORS origin").
            detail = message.get("body", b"").decode("utf-8", "replace")
            kept = {
                name.decode("latin-1"): value.decode("latin-1")
                for name, value in refusal.get("headers", [])
                if name.lower().startswith(b"access-control-") or name.lower() == b"vary"
            }
            response = problem(
                Request(scope),
                400,
                "cors_refused",
                "CORS request refused",
                f"{detail}: DEALBASE_CORS_ORIGINS lists the origins whose pages may call the API.",
                headers=kept,
            )
            await response(scope, receive, send)

        await self.app(scope, receive, answer)
