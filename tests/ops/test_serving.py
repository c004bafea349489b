"""The HTTP server's own bounds on a request's head (``ops.serving.HttpProtocol``), over real
sockets: uvicorn in a thread, with the protocol ``dealbase serve`` gives it, in front of an app
that answers every request it is handed 200. The server's event loop keeps the test's clock
(``tests.ops.clocked_server``): a head's time runs out when the test moves the clock past it.
And the write timeout ``dealbase serve`` gives the connections of its listening socket."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import orjson
import pytest
from uvicorn import Config

from dealbase.ops import serving
from dealbase.ops.serving import (
    MAX_TARGET_BYTES,
    HeadLimits,
    HttpProtocol,
    bound_unacknowledged_writes,
)
from tests.ops.clocked_server import served_on_a_clock
from tests.support import LoopClock, free_port

HEAD_SECONDS = 1.0
# How far before a head's time ends the tests look that it has not been answered yet.
JUST_BEFORE_S = 0.001
MAX_HEAD_BYTES = 16_384
# How long a client waits for an answer before the test fails (a failure bound only).
READ_TIMEOUT_S = 30.0


async def _read_and_answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})


class _Seen:
    """What the server did of each connection, by the client's port: "made" (accepted, its
    head's time running) and "head" (a request's head begun, its own time running)."""

    def __init__(self) -> None:
        self._events: list[tuple[str, int]] = []
        self._changed = threading.Condition()

    def note(self, what: str, port: int) -> None:
        with self._changed:
            self._events.append((what, port))
            self._changed.notify_all()

    def wait_for(self, what: str, connection: socket.socket, count: int = 1) -> None:
        port = connection.getsockname()[1]
        with self._changed:
            assert self._changed.wait_for(
                lambda: self._events.count((what, port)) >= count, timeout=READ_TIMEOUT_S
            ), f"the server did not see {what} #{count} of port {port}"


class _WatchedProtocol(HttpProtocol):
    """``HttpProtocol`` telling ``seen`` when its timers start: the test moves the clock only
    after that."""

    def __init__(self, *args: Any, seen: _Seen, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seen = seen

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        assert self.client is not None
        self._seen.note("made", self.client[1])

    def on_message_begin(self) -> None:
        super().on_message_begin()
        assert self.client is not None
        self._seen.note("head", self.client[1])


@dataclass(frozen=True)
class _Server:
    address: tuple[str, int]
    clock: LoopClock
    seen: _Seen


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    port = free_port()
    seen = _Seen()
    loop_clock = LoopClock()
    limits = HeadLimits(HEAD_SECONDS, MAX_HEAD_BYTES)
    config = Config(
        _read_and_answer,
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="off",
        http=cast(Any, partial(_WatchedProtocol, head_limits=limits, seen=seen)),
    )
    with served_on_a_clock(config, loop_clock):
        yield _Server(("127.0.0.1", port), loop_clock, seen)


@pytest.fixture(scope="module")
def address(server: _Server) -> tuple[str, int]:
    return server.address


def _connect(address: tuple[str, int]) -> socket.socket:
    return socket.create_connection(address, timeout=READ_TIMEOUT_S)


def _answered(connection: socket.socket) -> bool:
    """Whether the server has written to the connection, or closed it."""
    return bool(select.select([connection], [], [], 0)[0])


def _read_until_closed(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(65_536):
        received += chunk
    return received


def _problem(response: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *fields = head.decode().split("\r\n")
    headers = {
        name.lower(): value.strip() for name, _, value in (field.partition(":") for field in fields)
    }
    assert headers["content-type"] == "application/problem+json", response
    assert headers["connection"] == "close"
    problem = orjson.loads(body)
    assert problem["request_id"] == headers["x-request-id"]
    assert problem["status"] == int(status_line.split()[1])
    return problem["status"], headers, problem


def _get(target: str = "/", *fields: str) -> bytes:
    return "\r\n".join([f"GET {target} HTTP/1.1", "Host: dealbase", *fields, "", ""]).encode()


def test_a_head_trickled_past_its_time_is_answered_408_and_closed(server: _Server) -> None:
    clock = server.clock
    with _connect(server.address) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\nHost: dealbase\r\n")
        server.seen.wait_for("head", connection)
        begun = clock.now()
        # A header line every half of the allowed time: the head's time does not start again.
        clock.advance(HEAD_SECONDS / 2)
        connection.sendall(b"X-Slow: y\r\n")
        clock.advance_to(begun + HEAD_SECONDS - JUST_BEFORE_S)
        connection.sendall(b"X-Slow: y\r\n")
        assert not _answered(connection)
        clock.advance_to(begun + HEAD_SECONDS)
        status, _, problem = _problem(_read_until_closed(connection))
    assert (status, problem["code"]) == (408, "request_timeout")


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(server: _Server) -> None:
    clock = server.clock
    with _connect(server.address) as connection:
        server.seen.wait_for("made", connection)
        made = clock.now()
        clock.advance_to(made + HEAD_SECONDS - JUST_BEFORE_S)
        assert not _answered(connection)
        clock.advance_to(made + HEAD_SECONDS)
        assert _read_until_closed(connection) == b""


def test_each_request_on_a_kept_connection_has_its_own_time(server: _Server) -> None:
    clock = server.clock
    with _connect(server.address) as connection:
        connection.sendall(_get())
        assert connection.recv(65_536).startswith(b"HTTP/1.1 200 ")
        # Idle well within the keep-alive time, then a head that never ends: its time runs
        # from its own first byte, past the first request's and the connection's.
        clock.advance(HEAD_SECONDS / 2)
        connection.sendall(b"GET / HTTP/1.1\r\n")
        server.seen.wait_for("head", connection, count=2)
        begun = clock.now()
        clock.advance_to(begun + HEAD_SECONDS - JUST_BEFORE_S)
        assert not _answered(connection)
        clock.advance_to(begun + HEAD_SECONDS)
        status, _, problem = _problem(_read_until_closed(connection))
    assert (status, problem["code"]) == (408, "request_timeout")


def test_a_header_that_never_ends_is_refused_431_without_waiting_for_its_end(
    address: tuple[str, int],
) -> None:
    """20 MB of one header value that never ends, sent at once: uvicorn alone read it all into
    memory, waiting for its end."""
    with _connect(address) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\nHost: dealbase\r\nX-Big: " + b"a" * 20_000_000)
        status, _, problem = _problem(_read_until_closed(connection))
    assert (status, problem["code"]) == (431, "request_header_fields_too_large")


@pytest.mark.parametrize(
    ("value_bytes", "status"),
    [(MAX_HEAD_BYTES // 2, 200), (MAX_HEAD_BYTES, 431)],
)
def test_a_whole_head_is_served_under_the_limit_and_refused_431_over_it(
    address: tuple[str, int], value_bytes: int, status: int
) -> None:
    with _connect(address) as connection:
        connection.sendall(_get("/", "X-Big: " + "a" * value_bytes, "Connection: close"))
        response = _read_until_closed(connection)
    assert response.startswith(f"HTTP/1.1 {status} ".encode()), response[:200]
    if status != 200:
        assert _problem(response)[2]["code"] == "request_header_fields_too_large"


def test_many_small_headers_over_the_limit_are_refused_431(address: tuple[str, int]) -> None:
    fields = [f"X-Field-{n}: {'v' * 100}" for n in range(MAX_HEAD_BYTES // 100)]
    with _connect(address) as connection:
        connection.sendall(_get("/", *fields))
        status, _, problem = _problem(_read_until_closed(connection))
    assert (status, problem["code"]) == (431, "request_header_fields_too_large")


@pytest.mark.parametrize(
    ("target_bytes", "status"), [(8_000, 200), (MAX_TARGET_BYTES + 1, 414), (1_000_000, 414)]
)
def test_a_target_longer_than_8_kib_is_answered_414_as_a_problem(
    address: tuple[str, int], target_bytes: int, status: int
) -> None:
    target = "/customers?email=" + "a" * (target_bytes - len("/customers?email="))
    with _connect(address) as connection:
        connection.sendall(_get(target, "Connection: close"))
        response = _read_until_closed(connection)
    assert response.startswith(f"HTTP/1.1 {status} ".encode()), response[:200]
    if status != 200:
        assert _problem(response)[2]["code"] == "uri_too_long"


def test_bytes_that_are_not_http_are_answered_400_as_a_problem(address: tuple[str, int]) -> None:
    with _connect(address) as connection:
        connection.sendall(b"\x16\x03\x01 this is not HTTP\r\n\r\n")
        status, _, problem = _problem(_read_until_closed(connection))
    assert (status, problem["code"]) == (400, "malformed_request")


def test_a_head_that_follows_a_big_body_in_one_send_is_not_counted_with_it(
    address: tuple[str, int],
) -> None:
    """Pipelined: a body larger than the head limit, then the next request, in one write."""
    body = b"x" * (MAX_HEAD_BYTES * 8)
    post = (
        b"POST / HTTP/1.1\r\nHost: dealbase\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    with _connect(address) as connection:
        connection.sendall(post + _get("/", "Connection: close"))
        response = _read_until_closed(connection)
    assert response.count(b"HTTP/1.1 200 ") == 2, response[:400]


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="no TCP_USER_TIMEOUT here")
def test_the_listening_socket_gives_each_connection_the_write_timeout_in_milliseconds() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound_unacknowledged_writes(listening, 2.5)
        with socket.create_connection(listening.getsockname(), timeout=READ_TIMEOUT_S):
            accepted, _ = listening.accept()
            with accepted:
                inherited = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        own = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)

    assert own == inherited == 2_500


def test_a_unix_socket_is_left_without_a_write_timeout() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        # A TCP option has no place on a Unix socket: setting one raises.
        bound_unacknowledged_writes(listening, 2.5)


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="no TCP_USER_TIMEOUT here")
def test_serving_hands_the_server_a_listening_socket_bound_by_the_write_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed: list[int] = []

    class _Server:
        """uvicorn's ``Server``, as far as ``serving.run`` uses it: it notes the option of each
        socket it is handed, and serves nothing."""

        def __init__(self, config: Config) -> None:
            pass

        def run(self, sockets: list[socket.socket]) -> None:
            for listening in sockets:
                with listening:
                    option = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
                    handed.append(option)

    monkeypatch.setattr(serving, "Server", _Server)
    config = Config(_read_and_answer, host="127.0.0.1", port=free_port(), log_config=None)

    serving.run(config, HeadLimits(HEAD_SECONDS, MAX_HEAD_BYTES), 2.5)

    assert handed == [2_500]
