"""The edge around every HTTP request (REST and GraphQL), as one ASGI layer: the request id,
the guards on its headers and body, the RateLimit headers of its answer, its access log line
and its metrics.

One layer rather than one per concern: each ASGI middleware wraps ``send`` (and some
``receive``) in a closure of its own and adds a call to every message, and a request's headers
were read once per concern. Here they are read once, and the answer goes through one wrapper.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.routing import Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbase.edge.draining import PROCESS_DRAINING, Draining
from dealbase.edge.problems import problem
from dealbase.edge.rate_limit_headers import rate_limit_headers
from dealbase.edge.route_index import RouteIndex
from dealbase.tenancy.rate_limits.admission import VERDICT_STATE
from dealbase.tenancy.rate_limits.limiter import Verdict

_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# The route of a request no route matched: one label for every unknown path.
UNMATCHED = "unmatched"
# Where the edge keeps an authenticated request's Scope (request.state), for its access line.
CALLER_STATE = "caller"
# Where Starlette's exception layer gives the routes below it the app's exception handlers (by
# class, by status), in each request's scope.
EXCEPTION_HANDLERS = "starlette.exception_handlers"

# (route template, method, status, seconds): called once per answered request.
RequestObserver = Callable[[str, str, int, float], None]
# Writes a request's access line from its fields (the event ``request``); it may keep them.
AccessLog = Callable[[dict[str, Any]], None]

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
# How long a request's body may take to arrive, from its head (the setting's default):
# a client trickling bodies would otherwise hold connections and their requests for ever.
BODY_SECONDS = 60.0

# Headers that carry one value (RFC 9110 5.3): two of them are ambiguous, and a proxy that reads
# the other one than the app would authorise, deduplicate or parse another request.
SINGLE_VALUED = frozenset(
    {b"x-api-key", b"x-department-id", b"idempotency-key", b"content-type", b"content-length"}
)


class _TooLarge(Exception):
    pass


class _BodyLate(Exception):
    pass


# Optional white space around a header field's value: a space or a horizontal tab.
_WHITE_SPACE = (b" ", b"\t")


class RequestEdge:
    """Gives every HTTP request an id (the client's ``X-Request-Id`` when it is sane), bound to
    the log context and echoed in the answer; refuses a repeated single-valued header (400), a
    body past its cap (413, 8 MiB for a batch, else 1 MiB) and one not in within
    ``body_seconds`` of the request's head (408, and the connection closed); adds the RateLimit
    headers of the request's verdict, when it has one; closes the connection of every answer
    once the server has begun to stop (``draining``); and writes one access line per request
    and reports it to ``observe`` (metrics)."""

    def __init__(
        self,
        app: ASGIApp,
        observe: RequestObserver | None = None,
        log: AccessLog | None = None,
        max_bytes: int = MAX_BODY_BYTES,
        batch_max_bytes: int = MAX_BATCH_BODY_BYTES,
        body_seconds: float = BODY_SECONDS,
        draining: Draining = PROCESS_DRAINING,
    ) -> None:
        self.app = app
        self.draining = draining
        self.body_seconds = body_seconds
        self._late_bodies = _LateBodies()
        self.observe = observe
        self.log = log or _log_through_structlog
        self.max_bytes = max_bytes
        self.batch_max_bytes = batch_max_bytes
        self._routes: _Routes | None = None
        self._routes_found = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = _RequestHead(scope["headers"])
        method = scope["method"]
        if head.trimmed is not None or method == "HEAD":
            # The app's own view of the request; the server keeps its own (uvicorn sends no
            # body for a HEAD, by its scope).
            headers = head.trimmed if head.trimmed is not None else scope["headers"]
            scope = {**scope, "headers": headers}
            if method == "HEAD":
                # HEAD wherever GET is served: the GET runs, and only its head is sent.
                scope["method"] = "GET"
        # 32 random hex digits: ``uuid.uuid4().hex``'s, without the cost of building its UUID.
        request_id = head.request_id or os.urandom(16).hex()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        answer = _Answer(send, state, request_id, method == "HEAD", self.draining)
        try:
            if head.repeated:
                await _refuse_repeated(scope, receive, answer, head.repeated)
                return
            await self._guarded(scope, receive, answer, head.declared, head.expect)
        finally:
            self._account(scope, state, method, answer.status, time.perf_counter() - started)

    def _account(
        self, scope: Scope, state: dict[str, Any], method: str, status: int, seconds: float
    ) -> None:
        """The request's access line and its metrics."""
        route = getattr(scope.get("route"), "path", UNMATCHED)
        caller = state.get(CALLER_STATE)
        self.log(
            {
                "method": method,
                "path": scope["path"],
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
                # The key's id, never its secret.
                **(caller.logged_ids() if caller else _NO_CALLER),
            }
        )
        if self.observe is not None:
            self.observe(route, method, status, seconds)

    async def _guarded(
        self, scope: Scope, receive: Receive, answer: _Answer, declared: bytes, expect: bytes
    ) -> None:
        """The app, with the request's body capped (a declared length past the cap is refused
        before any of it is read)."""
        max_bytes = self.batch_max_bytes if scope["path"].endswith("/batch") else self.max_bytes
        if declared.isdigit() and int(declared) > max_bytes:
            # A client that waits for 100 Continue has sent no body: refused before it does.
            if expect.lower() != b"100-continue" and int(declared) <= DRAIN_BYTES:
                await _drain(receive, 0)
            await _refuse(scope, receive, answer, max_bytes)
            return
        due = asyncio.get_running_loop().time() + self.body_seconds
        body = _CountedBody(receive, max_bytes, due, self._late_bodies)
        routes = self._routes_behind()
        route = routes.direct(scope) if routes is not None else None
        try:
            await (self.app if route is None else route.app)(scope, body.receive, answer)
        except _TooLarge:
            if answer.answering:
                raise
            if not body.ended:
                # After its last part, a server's receive waits for the client to go.
                await _drain(receive, body.received)
            await _refuse(scope, receive, answer, max_bytes)
        except _BodyLate:
            if answer.answering:
                raise
            await self._refuse_late_body(scope, receive, answer)
        finally:
            if route is None and routes is not None and routes.handlers is None:
                routes.learn(scope)

    def _routes_behind(self) -> _Routes | None:
        if not self._routes_found:
            self._routes = _Routes.behind(self.app)
            self._routes_found = True
        return self._routes

    async def _refuse_late_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        late = problem(
            Request(scope),
            408,
            "request_timeout",
            "Request timeout",
            f"The request's body did not arrive within {self.body_seconds:g} seconds.",
            # The body's rest may still come: the connection cannot carry another request.
            headers={"Connection": "close"},
        )
        await late(scope, receive, send)


class _RequestHead:
    """What the edge reads of a request's headers, in one pass over them."""

    __slots__ = ("declared", "expect", "repeated", "request_id", "trimmed")

    def __init__(self, received: list[tuple[bytes, bytes]]) -> None:
        # The client's X-Request-Id: "" when it is not sane, None when it sent none.
        self.request_id: str | None = None
        # Content-Length and Expect, as sent.
        self.declared = self.expect = b""
        self.repeated: set[bytes] = set()
        # The headers with their values' surrounding white space removed, when any had some.
        self.trimmed: list[tuple[bytes, bytes]] | None = None
        seen: set[bytes] = set()
        for index, (raw_name, raw_value) in enumerate(received):
            value = raw_value
            if value[:1] in _WHITE_SPACE or value[-1:] in _WHITE_SPACE:
                # A field value's surrounding white space is not part of it (RFC 9110, 5.5):
                # a key pasted with a trailing space is still the key.
                value = value.strip(b" \t")
                self.trimmed = self.trimmed if self.trimmed is not None else list(received)
                self.trimmed[index] = (raw_name, value)
            name = raw_name.lower()
            if name in SINGLE_VALUED:
                (self.repeated if name in seen else seen).add(name)
                if name == b"content-length":
                    self.declared = value
            elif name == b"x-request-id":
                if self.request_id is None:
                    candidate = value.decode("latin-1")
                    self.request_id = candidate if _CLIENT_REQUEST_ID.fullmatch(candidate) else ""
            elif name == b"expect":
                self.expect = value


@dataclass(slots=True, eq=False)
class _Answer:
    """The ``send`` the app answers through: the answer's head gets the request's RateLimit
    headers and id (and ``Connection: close`` once the server drains), a HEAD's body is
    dropped, and its status is kept for the access line."""

    send: Send
    state: dict[str, Any]
    request_id: str
    head_only: bool
    draining: Draining
    # 500 until the app starts an answer.
    status: int = 500
    answering: bool = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.answering = True
            self.status = message["status"]
            headers = [*message.get("headers", [])]
            verdict = self.state.get(VERDICT_STATE)
            if isinstance(verdict, Verdict):
                headers.extend(rate_limit_headers(verdict))
            headers.append((b"x-request-id", self.request_id.encode()))
            if self.draining.begun:
                headers.append((b"connection", b"close"))
            message["headers"] = headers
        elif self.head_only and message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await self.send(message)


@dataclass(slots=True, eq=False)
class _CountedBody:
    """The request's ``receive``, counting its body's bytes against the cap (``_TooLarge``
    past it) and giving up on a body not in by ``due`` (``_BodyLate``)."""

    server_receive: Receive
    max_bytes: int
    due: float
    late_bodies: _LateBodies
    received: int = 0
    ended: bool = False

    async def receive(self) -> Message:
        if self.ended:
            # Past the body, a server's receive waits for the client to go: not bounded.
            return await self.server_receive()
        message = await self.late_bodies.receive(self.server_receive, self.due)
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.ended = not message.get("more_body", False)
            if self.received > self.max_bytes:
                raise _TooLarge
        return message


async def _refuse_repeated(
    scope: Scope, receive: Receive, send: Send, repeated: set[bytes]
) -> None:
    names = ", ".join(sorted(name.decode() for name in repeated))
    refusal = problem(
        Request(scope),
        400,
        "repeated_header",
        "Repeated header",
        f"Send each of these headers once: {names}.",
    )
    await refusal(scope, receive, send)


class _BodyWait:
    __slots__ = ("due", "late", "task")

    def __init__(self, due: float, task: asyncio.Task[Any]) -> None:
        self.due = due
        self.task = task
        self.late = False


class _LateBodies:
    """The requests waiting for their body's next part, each with the time it is due by, and
    one timer that gives up those past it: a timeout per request (``asyncio.timeout_at``) cost
    a timer handle each, several times the cost of the wait itself."""

    def __init__(self) -> None:
        self._waiting: dict[_BodyWait, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def receive(self, receive: Receive, due: float) -> Message:
        """``receive()``; raises ``_BodyLate`` once the loop's clock passes ``due`` first."""
        task = asyncio.current_task()
        assert task is not None
        wait = _BodyWait(due, task)
        self._waiting[wait] = None
        loop = asyncio.get_running_loop()
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_later(_SWEEP_SECONDS, self._sweep, loop)
        try:
            return await receive()
        except asyncio.CancelledError:
            if wait.late and task.uncancel() == 0:
                raise _BodyLate from None
            raise
        finally:
            del self._waiting[wait]

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return  # a loop given up for another (tests run the app on several)
        self._timer = None
        if not self._waiting:
            return
        now = loop.time()
        for wait in self._waiting:
            if wait.due <= now and not wait.late:
                wait.late = True
                wait.task.cancel()
        self._timer = loop.call_later(_SWEEP_SECONDS, self._sweep, loop)


# How often the late bodies are looked for: a body is given up at most this long after it is due.
_SWEEP_SECONDS = 0.5


class _Routes:
    """The routes behind the edge, when only Starlette's exception layer, FastAPI's exit stack
    and a router with a ``RouteIndex`` stand between them: a route ``CALLED_DIRECTLY`` is called
    from here, given the exception handlers the exception layer would have put in its scope.
    Called this way a request skips two layers' work, none of which such a route uses: it maps
    its errors itself, and needs no exit stack (it closes no file). The handlers are those the layer put in the scope of a request it
    served (``learn``): until one has gone through it, every request does."""

    def __init__(self, index: RouteIndex) -> None:
        self.index = index
        self.handlers: Any = None

    @classmethod
    def behind(cls, app: ASGIApp) -> _Routes | None:
        exit_stack = getattr(app, "app", None)
        router = getattr(exit_stack, "app", None)
        if not (
            type(app) is ExceptionMiddleware
            and type(exit_stack) is AsyncExitStackMiddleware
            and isinstance(router, Router)
            and isinstance(router.middleware_stack, RouteIndex)
        ):
            return None
        return cls(router.middleware_stack)

    def learn(self, scope: Scope) -> None:
        """Keeps the handlers the exception layer put in the scope of a request it served."""
        self.handlers = scope.get(EXCEPTION_HANDLERS)

    def direct(self, scope: Scope) -> Any:
        if self.handlers is None:
            return None
        route = self.index.direct(scope)
        if route is not None:
            scope[EXCEPTION_HANDLERS] = self.handlers
        return route


_NO_CALLER = {"tenant_id": None, "department_id": None, "key_id": None}
_access = structlog.get_logger("dealbase.access")


def _log_through_structlog(fields: dict[str, Any]) -> None:
    _access.info("request", **fields)


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


async def _refuse(scope: Scope, receive: Receive, send: Send, max_bytes: int) -> None:
    response = problem(
        Request(scope),
        413,
        "payload_too_large",
        "Payload too large",
        f"The body exceeds {max_bytes} bytes.",
    )
    await response(scope, receive, send)
