"""How ``dealbase serve``'s server stops (``ops.serving.DrainingServer``), over real sockets:
uvicorn in a thread, on an event loop whose clock the test moves (``tests.ops.clocked_server``),
in front of the request edge and an app that answers 200. And the write timeout ``dealbase
serve`` gives the connections of its listening socket."""

from __future__ import annotations

import select
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from starlette.types import Receive, Scope, Send
from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE

from dealbase.edge.draining import Draining
from dealbase.edge.request_edge import RequestEdge
from dealbase.ops import serving
from dealbase.ops.serving import DRAIN_SECONDS, DrainingServer, bound_unacknowledged_writes
from tests.ops.clocked_server import served_on_a_clock
from tests.support import LoopClock, free_port

# How long a client waits for an answer, or the test for the server, before it fails (a failure
# bound only).
READ_TIMEOUT_S = 30.0
# How far before the drain's end the tests look that it has not ended yet.
JUST_BEFORE_S = 0.001


async def _read_and_answer(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})


@dataclass(frozen=True)
class _Served:
    address: tuple[str, int]
    clock: LoopClock
    server: DrainingServer
    draining: Draining


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Served]:
    """A server draining its own notice (the process's is left alone), on a socket bound as
    ``serving.run`` binds it."""
    draining = Draining()
    monkeypatch.setattr(serving, "PROCESS_DRAINING", draining)
    config = Config(
        RequestEdge(_read_and_answer, draining=draining),
        host="127.0.0.1",
        port=free_port(),
        log_config=None,
        lifespan="off",
    )
    listening = config.bind_socket()
    server = DrainingServer(config)
    loop_clock = LoopClock()
    with served_on_a_clock(config, loop_clock, server, [listening]):
        yield _Served(listening.getsockname(), loop_clock, server, draining)


def _connect(address: tuple[str, int]) -> socket.socket:
    return socket.create_connection(address, timeout=READ_TIMEOUT_S)


def _closed_or_written(connection: socket.socket) -> bool:
    return bool(select.select([connection], [], [], 0)[0])


def _response(connection: socket.socket) -> tuple[bytes, dict[str, str]]:
    """One response of a kept connection: its status line and headers (its body is six bytes)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65_536)
        assert chunk, f"closed after {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    while len(body) < len(b"served"):
        body += connection.recv(65_536)
    status, *fields = head.decode().split("\r\n")
    headers = {
        name.lower(): value.strip() for name, _, value in (field.partition(":") for field in fields)
    }
    return status.encode(), headers


GET = b"GET / HTTP/1.1\r\nHost: dealbase\r\n\r\n"


def _signal_and_wait_for_the_drain(served: _Served) -> None:
    begun = threading.Event()
    served.draining.on_begin(begun.set)
    served.server.handle_exit(signal.SIGTERM, None)
    assert begun.wait(READ_TIMEOUT_S), "the server did not begin to drain"


def test_a_signal_stops_the_listening_at_once_and_answers_kept_connections_closing_them(
    served: _Served,
) -> None:
    with _connect(served.address) as kept:
        kept.sendall(GET)
        status, headers = _response(kept)
        assert (status, headers.get("connection")) == (b"HTTP/1.1 200 OK", None)

        _signal_and_wait_for_the_drain(served)

        # No new connection is taken (nor completed, to be reset later)...
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(served.address, timeout=READ_TIMEOUT_S).close()
        # ...but the request a client sends on its kept connection is answered, and the answer
        # closes it: the client reconnects to a server still listening.
        kept.sendall(GET)
        status, headers = _response(kept)
        assert (status, headers.get("connection")) == (b"HTTP/1.1 200 OK", "close")
        assert kept.recv(1) == b""
    # All before the drain's time has run: uvicorn's own stop has not begun.
    assert not served.server.should_exit


def test_an_idle_connection_is_closed_once_the_drain_has_run_its_time(served: _Served) -> None:
    with _connect(served.address) as idle:
        idle.sendall(GET)
        _response(idle)

        _signal_and_wait_for_the_drain(served)
        served.clock.advance(DRAIN_SECONDS - JUST_BEFORE_S)
        assert not _closed_or_written(idle)
        assert not served.server.should_exit

        served.clock.advance(JUST_BEFORE_S)
        assert served.server.should_exit
        # uvicorn's own stop closes what is idle, once its loop has looked (every tenth of a
        # second of its clock).
        while not select.select([idle], [], [], 0.01)[0]:
            served.clock.advance(0.1)
        assert idle.recv(1) == b""


def test_a_second_signal_stops_the_server_without_waiting_for_the_drain(
    served: _Served,
) -> None:
    _signal_and_wait_for_the_drain(served)
    assert not served.server.should_exit

    served.server.handle_exit(signal.SIGTERM, None)

    assert served.server.should_exit


@dataclass
class _Worker:
    """A worker process as ``Workers`` looks at it."""

    exitcode: int | None
    pid: int = 4_000

    def is_alive(self) -> bool:
        return self.exitcode is None


def _workers(*running: _Worker) -> tuple[serving.Workers, list[_Worker]]:
    workers = serving.Workers(Config(_read_and_answer, workers=len(running)), [])
    workers.processes = list(running)  # type: ignore[arg-type]
    started: list[_Worker] = []

    def start() -> Any:
        started.append(_Worker(None))
        return started[-1]

    workers.started = start  # type: ignore[method-assign]
    return workers, started


def test_a_worker_that_stops_on_its_own_is_replaced() -> None:
    alive, crashed = _Worker(None), _Worker(exitcode=-9)
    workers, started = _workers(alive, crashed)

    assert workers.replace_stopped() == 0

    assert cast(list[object], workers.processes) == [alive, *started] and len(started) == 1
    assert not workers.stop.is_set()


def test_a_worker_that_failed_to_start_stops_them_all_with_its_status() -> None:
    workers, started = _workers(_Worker(None), _Worker(exitcode=STARTUP_FAILURE))

    assert workers.replace_stopped() == STARTUP_FAILURE

    assert workers.stop.is_set() and started == []


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

    monkeypatch.setattr(serving, "DrainingServer", _Server)
    config = Config(_read_and_answer, host="127.0.0.1", port=free_port(), log_config=None)

    serving.run(config, 2.5)

    assert handed == [2_500]
