"""The request id that ties a response to its log lines, and one access log line per request."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# The route of a request no route matched: one label for every unknown path.
UNMATCHED = "unmatched"
# Where the edge keeps an authenticated request's Scope (request.state), for its access line.
CALLER_STATE = "caller"

# (route template, method, status, seconds): called once per answered request.
RequestObserver = Callable[[str, str, int, float], None]


class RequestContextMiddleware:
    """Gives every HTTP request an id (the client's ``X-Request-Id`` when it is sane), echoes it in
    the response, binds it to the log context, writes one access log line per request, and
    reports each to ``observe`` (metrics)."""

    def __init__(self, app: ASGIApp, observe: RequestObserver | None = None) -> None:
        self.app = app
        self.log = structlog.get_logger("dealbase.access")
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                if _CLIENT_REQUEST_ID.match(candidate):
                    request_id = candidate
                break
        scope.setdefault("state", {})["request_id"] = request_id
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", UNMATCHED)
            caller = scope["state"].get(CALLER_STATE)
            self.log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                route=route,
                status=status,
                duration_ms=round(seconds * 1000, 2),
                # The key's id, never its secret.
                tenant_id=str(caller.tenant_id) if caller else None,
                department_id=str(caller.department_id)
                if caller and caller.department_id
                else None,
                key_id=str(caller.key_id) if caller and caller.key_id else None,
            )
            if self.observe is not None:
                self.observe(route, scope["method"], status, seconds)
