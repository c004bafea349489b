"""How the HTTP server writes its answers (``ops.serving.TurnWriter``) and its WebSocket
messages (``ops.serving.FrameWriter``), over real sockets: a response's head and body leave in
one segment, the messages one turn of the event loop sends leave together, and nothing written
waits for later work. The server's event loop keeps the test's clock
(``tests.ops.clocked_server``): what the app sends after a pause leaves only once the test moves
the clock, so what leaves before that did not wait for it."""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import pytest
from uvicorn import Config
from websockets.exceptions import ConnectionClosedOK
from websockets.sync.client import ClientConnection, connect

from dealbase.ops.serving import HeadLimits, HttpProtocol, WebSocketProtocol
from tests.ops.clocked_server import served_on_a_clock
from tests.support import LoopClock, free_port

# By the server's loop's clock, which only the tests move.
STREAM_PAUSE_SECONDS = 0.5
# How long a client waits for what the server sends before the test fails (a failure bound).
READ_TIMEOUT_S = 30.0
# Released as the app begins a pause: the test moves the clock only after that.
PAUSING = threading.Semaphore(0)


async def _pause() -> None:
    PAUSING.release()
    await asyncio.sleep(STREAM_PAUSE_SECONDS)


# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, the segments received that carried data.
TCP_INFO_DATA_SEGMENTS_IN = 152


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await _messages(receive, send)
        return
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    if scope["path"] == "/streamed":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await _pause()
        await send({"type": "http.response.body", "body": b"late", "more_body": False})
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"6")]}
    )
    await send({"type": "http.response.body", "body": b"served"})


async def _messages(receive: Any, send: Any) -> None:
    """A WebSocket that answers "N" with N messages sent one after the other in one turn,
    "late" with one message after a pause, and "bye" with its close."""
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        asked = message["text"]
        if asked == "late":
            await _pause()
            await send({"type": "websocket.send", "text": "late"})
        elif asked == "bye":
            await send({"type": "websocket.send", "text": "last"})
            await send({"type": "websocket.close", "code": 1000, "reason": "bye"})
            return
        else:
            for number in range(int(asked)):
                await send({"type": "websocket.send", "text": f"{number:04d}" * 50})


@dataclass(frozen=True)
class _Server:
    address: tuple[str, int]
    clock: LoopClock


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    port = free_port()
    loop_clock = LoopClock()
    config = Config(
        _answer,
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="off",
        http=cast(Any, partial(HttpProtocol, head_limits=HeadLimits(5.0, 16_384))),
        ws=cast(Any, WebSocketProtocol),
    )
    with served_on_a_clock(config, loop_clock):
        yield _Server(("127.0.0.1", port), loop_clock)


@pytest.fixture(scope="module")
def address(server: _Server) -> tuple[str, int]:
    return server.address


def _end_the_pause(server: _Server) -> None:
    assert PAUSING.acquire(timeout=READ_TIMEOUT_S), "the app did not pause"
    server.clock.advance(STREAM_PAUSE_SECONDS)


def _read_until(client: socket.socket, end: bytes) -> bytes:
    data = b""
    while not data.endswith(end):
        chunk = client.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def _data_segments_received(client: socket.socket) -> int:
    info = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    count: int = struct.unpack_from("I", info, TCP_INFO_DATA_SEGMENTS_IN)[0]
    return count


def test_each_answer_arrives_in_one_segment_head_and_body_together(
    address: tuple[str, int],
) -> None:
    with socket.create_connection(address, timeout=READ_TIMEOUT_S) as client:
        for _ in range(20):
            client.sendall(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            answer = _read_until(client, b"served")
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")

        assert _data_segments_received(client) == 20


def test_a_head_whose_body_comes_later_is_sent_at_once(server: _Server) -> None:
    with socket.create_connection(server.address, timeout=READ_TIMEOUT_S) as client:
        client.sendall(b"GET /streamed HTTP/1.1\r\nhost: test\r\n\r\n")
        # The body waits for the clock to move: the head arrives without it.
        head = _read_until(client, b"\r\n\r\n")
        body_before_the_pause = select.select([client], [], [], 0)[0]
        _end_the_pause(server)
        rest = _read_until(client, b"0\r\n\r\n")

    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert not body_before_the_pause
    assert b"late" in rest


def test_an_answer_that_closes_its_connection_is_sent_whole_first(
    address: tuple[str, int],
) -> None:
    with socket.create_connection(address, timeout=5) as client:
        client.sendall(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        received = b""
        while chunk := client.recv(65536):
            received += chunk

    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.endswith(b"\r\n\r\nserved")


def _websocket(address: tuple[str, int]) -> ClientConnection:
    host, port = address
    return connect(f"ws://{host}:{port}/", open_timeout=READ_TIMEOUT_S, close_timeout=5)


def test_the_messages_one_turn_sends_arrive_together_in_one_segment(
    address: tuple[str, int],
) -> None:
    with _websocket(address) as websocket:
        assert _data_segments_received(websocket.socket) == 1  # the handshake's answer
        websocket.send("20")
        received = [websocket.recv(timeout=READ_TIMEOUT_S) for _ in range(20)]

        assert received == [f"{number:04d}" * 50 for number in range(20)]
        assert _data_segments_received(websocket.socket) == 2


def test_a_message_sent_alone_leaves_at_once(server: _Server) -> None:
    with _websocket(server.address) as websocket:
        # Each arrives with the server's clock standing still: nothing held it for a while, or
        # for a later write.
        for _ in range(5):
            websocket.send("1")
            assert websocket.recv(timeout=READ_TIMEOUT_S) == "0000" * 50
        websocket.send("late")
        _end_the_pause(server)
        assert websocket.recv(timeout=READ_TIMEOUT_S) == "late"


def test_a_close_follows_the_messages_sent_before_it(address: tuple[str, int]) -> None:
    with _websocket(address) as websocket:
        websocket.send("bye")
        assert websocket.recv(timeout=READ_TIMEOUT_S) == "last"
        with pytest.raises(ConnectionClosedOK) as closed:
            websocket.recv(timeout=READ_TIMEOUT_S)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "bye")
