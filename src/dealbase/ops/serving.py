"""How ``dealbase serve`` runs uvicorn, so that stopping it drops no request.

On SIGTERM each uvicorn worker stops accepting, lets the requests in progress finish (within
``DEALBASE_SHUTDOWN_TIMEOUT_SECONDS``) answering them with ``Connection: close``, and stops. Two
gaps let requests that had reached the server go unanswered (a connection reset); the test of
four clients looping POSTs through a SIGTERM (tests/ops/test_serve.py) saw 4 resets with
neither closed, 1 in 3 of 4 runs with only the second closed, none in 8 with both:

- With several workers, the serving process holds the listening socket too, and ``uvicorn.run``
  kept it open until its workers had stopped: the kernel went on completing connections no
  process would accept (a client reconnecting after ``Connection: close``), and reset them when
  the process exited. ``ClosingSupervisor`` closes its copy before it stops the workers.
- A worker closes every idle keep-alive connection at once, and a client that sent its next
  request a moment earlier has it reset. ``HttpProtocol`` gives an idle connection
  ``DRAIN_SECONDS`` to deliver such a request, serves it with ``Connection: close``, then closes.

uvicorn's HTTP parser reads a request's head without a bound of time or size: fifty clients
trickling header bytes were all held past 100 s, and two unfinished 200 MB headers took one
worker from 117 MB to 602 MB. ``HttpProtocol`` bounds both (``HeadLimits``, from the settings) and
answers what it refuses, or cannot parse, with a problem (``application/problem+json``) as the app
would, instead of uvicorn's plain text.

uvicorn writes a response's head and its body apart, two system calls and two TCP segments for
every answer; ``TurnWriter`` sends what one turn of the event loop writes in one. Its WebSocket
protocol writes each message (frame) apart too: ``WebSocketProtocol`` sends the frames one turn
writes to a connection together (``FrameWriter``), so a live subscriber that fell behind gets the
events waiting for it in one system call rather than one each (bench/README.md, "live.py").
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from asyncio import TimerHandle
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import orjson
import structlog
from uvicorn import Config, Server
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.supervisors.multiprocess import Multiprocess

from dealbase.edge.problems import PROBLEM_MEDIA_TYPE, problem_document

log = structlog.get_logger(__name__)

# Longer than a client takes between a response and its next request on the same connection.
DRAIN_SECONDS = 1.0
# The key of the app's lifespan state holding what to call as the server starts to stop: the
# live subscriptions' streams, which would otherwise run on until the graceful timeout.
SERVER_STOPPING = "dealbase_server_stopping"


@dataclass(frozen=True)
class HeadLimits:
    """What a request's line and headers may take: ``seconds`` from its first byte (or from the
    connection's opening) to its end, and ``max_bytes`` in all."""

    seconds: float
    max_bytes: int


# After a refusal, how long what the client still sends is read and dropped before the connection
# closes: closed at once, with bytes unread, the kernel resets the connection, and the client may
# lose the answer before it reads it (a lingering close, as nginx and Apache do).
LINGER_SECONDS = 2.0

# RFC 9110 section 4.1 asks every server to take targets of 8,000 octets; the API's longest
# (a list's filters and cursor) take well under one.
MAX_TARGET_BYTES = 8_192


@dataclass(frozen=True)
class _Refusal:
    status: int
    code: str
    title: str
    detail: str


_MALFORMED = _Refusal(
    400, "malformed_request", "Malformed request", "This is not an HTTP/1.1 request."
)
_TARGET_TOO_LONG = _Refusal(
    414,
    "uri_too_long",
    "URI too long",
    f"The request's target (path and query) is longer than {MAX_TARGET_BYTES} bytes.",
)


class TurnWriter:
    """A connection's writes made in one turn of the event loop, sent together: the head of a
    response and its body (uvicorn writes them one after the other) go out in one send, one
    system call and one segment rather than two, for the server and for its client (the
    server's CPU a ``POST /customers``: bench/README.md).

    A write is held until the next one or the end of the turn, whichever comes first, so
    nothing waits on anything but the code already running: a head whose body comes later (a
    streamed answer) leaves at the end of its turn."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._held = None
            self._transport.writelines((held, data))

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self.flush()
        self._transport.close()


class FrameWriter:
    """A WebSocket connection's writes made in one turn of the event loop, sent in one system
    call at the end of the turn: the frames of every event a subscriber's task sends in one go
    (it takes all the events waiting for it before it yields), and those of its connection's
    other subscriptions. Flow control is the transport's: a turn's frames reach its buffer
    together, and the protocol pauses its sends as it would for one."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def flush(self) -> None:
        held = self._held
        if held:
            self._held = []
            # Frames held past the connection's loss go nowhere.
            if not self._transport.is_closing():
                self._transport.writelines(held)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (websockets' sans-I/O one) writing through a ``FrameWriter``
    once the connection is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # The protocol writes only through ``write``, ``is_closing``, ``close`` and the two
        # reading switches.
        self.transport = cast(asyncio.Transport, FrameWriter(self.transport, self.loop))


class _HeadRefused(Exception):
    """Raised in a parser callback to stop the parse; the parser re-raises it as its own error,
    which uvicorn answers through ``send_400_response``."""


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with the head of each request bounded by ``head_limits``,
    its refusals answered as problems, and idle connections drained on shutdown."""

    def __init__(self, *args: Any, head_limits: HeadLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_limits = head_limits
        self._draining = False
        # The head being read: its bytes so far, the timer that ends its time, and why it was
        # refused when a parser callback stopped the parse.
        self._head_bytes: int | None = None
        self._heads_begun = 0
        self._head_deadline: TimerHandle | None = None
        self._refusal: _Refusal | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._writer = TurnWriter(self.transport, self.loop)
        # A connection that sends nothing is held to the same time as one that sends slowly.
        self._head_deadline = self.loop.call_later(self._head_limits.seconds, self._head_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        heads_begun = self._heads_begun
        super().data_received(data)
        if self._head_bytes is None or self.transport.is_closing():
            return
        # The parser holds an unfinished header in memory until its end, so the bytes are
        # counted as they come, not once the head is whole. A chunk in which the head began may
        # hold the end of the request before it: of that one, only what was parsed counts.
        if self._heads_begun == heads_begun:
            self._head_bytes += len(data)
        else:
            self._head_bytes = self._parsed_head_bytes()
        if self._head_bytes > self._head_limits.max_bytes:
            self._refuse(self._head_too_large())

    def send_400_response(self, msg: str) -> None:
        self._refuse(self._refusal or _MALFORMED)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._end_head()
        self._heads_begun += 1
        self._head_bytes = 0
        self._head_deadline = self.loop.call_later(self._head_limits.seconds, self._head_expired)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_TARGET_BYTES:
            self._refusal = _TARGET_TOO_LONG
            raise _HeadRefused

    def on_headers_complete(self) -> None:
        self._end_head()
        if self._parsed_head_bytes() > self._head_limits.max_bytes:
            self._refusal = self._head_too_large()
            raise _HeadRefused
        # What an earlier response of the connection still holds goes first (an upgrade hands
        # the raw transport on).
        self._writer.flush()
        super().on_headers_complete()
        if self.cycle is not None:
            # The cycle writes only through ``write``, ``is_closing`` and ``close``.
            self.cycle.transport = cast(asyncio.Transport, self._writer)
            if self._draining:
                self.cycle.keep_alive = False

    def shutdown(self) -> None:
        for stopping in self.app_state.get(SERVER_STOPPING, ()):
            stopping()
        self._draining = True
        if self.cycle is None or self.cycle.response_complete:
            # The keep-alive timer's slot: data arriving cancels it, as it does the timer.
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                DRAIN_SECONDS, self.timeout_keep_alive_handler
            )
        else:
            self.cycle.keep_alive = False

    def _parsed_head_bytes(self) -> int:
        """The target's and the whole header fields' bytes (with ": " and CRLF)."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _end_head(self) -> None:
        self._head_bytes = None
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_expired(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        if self._head_bytes is None:
            # Nothing was sent: there is no request to answer.
            if self.cycle is None:
                self.transport.close()
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind a response still being sent: the connection ends with it.
            self.cycle.keep_alive = False
            return
        seconds = self._head_limits.seconds
        self._refuse(
            _Refusal(
                408,
                "request_timeout",
                "Request timeout",
                f"The request's line and headers did not arrive within {seconds:g} seconds.",
            )
        )

    def _head_too_large(self) -> _Refusal:
        limit = self._head_limits.max_bytes
        return _Refusal(
            431,
            "request_header_fields_too_large",
            "Request header fields too large",
            f"The request's line and headers are longer than {limit} bytes.",
        )

    def _refuse(self, refusal: _Refusal) -> None:
        """Answers the request being read with ``refusal`` and closes the connection, as the
        request edge would answer it (a problem, a request id), and logs it: no app saw it."""
        self._end_head()
        request_id = uuid.uuid4().hex
        body = orjson.dumps(
            problem_document(
                refusal.status, refusal.code, refusal.title, refusal.detail, request_id
            )
        )
        head = [STATUS_LINE[refusal.status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        self._writer.flush()
        head.extend(
            [
                b"content-type: " + PROBLEM_MEDIA_TYPE.encode() + b"\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"x-request-id: " + request_id.encode() + b"\r\n",
                b"connection: close\r\n\r\n",
            ]
        )
        self.transport.write(b"".join(head) + body)
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            # The client closing its side ends it sooner (eof_received).
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()
        log.warning(
            "http_request_refused",
            status=refusal.status,
            code=refusal.code,
            request_id=request_id,
            client=f"{self.client[0]}:{self.client[1]}" if self.client else None,
        )


class ClosingSupervisor(Multiprocess):
    def handle_term(self) -> None:
        for sock in self.sockets:
            # Shut down, not only closed: the socket stops listening for every process at once.
            # Closed, it went on listening while any worker still held it (one slower to stop
            # than another), and a client reconnecting to it then was reset.
            sock.shutdown(socket.SHUT_RD)
            sock.close()
        super().handle_term()


def bound_unacknowledged_writes(listening: socket.socket, write_timeout_seconds: float) -> None:
    """Gives each connection ``listening`` accepts TCP_USER_TIMEOUT of ``write_timeout_seconds``
    (a TCP socket, where the system has it; a Unix socket is left as it is)."""
    if hasattr(socket, "TCP_USER_TIMEOUT") and listening.family != socket.AF_UNIX:
        # The kernel gives up a connection whose data waits unacknowledged this long, a
        # full receive window included, and every connection accepted inherits it: a client
        # that never reads cannot hold a socket and its buffers. Closing a connection is not
        # enough, its buffered data would wait for the client for ever.
        timeout_ms = int(write_timeout_seconds * 1000)
        listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout_ms)


def run(config: Config, head_limits: HeadLimits, write_timeout_seconds: float) -> None:
    """Serves ``config`` as ``uvicorn.run`` does: in this process, or in ``config.workers``
    worker processes under ``ClosingSupervisor``, with ``HttpProtocol`` bound by
    ``head_limits`` and ``WebSocketProtocol``; a connection whose client has not read (or
    acknowledged) what was written to it for ``write_timeout_seconds`` is dropped."""
    # A partial, not a class made here: worker processes receive the config pickled, and a
    # partial of an importable class pickles with its arguments.
    config.http = cast(Any, partial(HttpProtocol, head_limits=head_limits))
    config.ws = cast(Any, WebSocketProtocol)
    listening = config.bind_socket()
    bound_unacknowledged_writes(listening, write_timeout_seconds)
    if config.workers > 1:
        ClosingSupervisor(config, sockets=[listening]).run()
    else:
        Server(config).run(sockets=[listening])
