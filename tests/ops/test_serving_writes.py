"""How the HTTP server writes its answers (``ops.serving.TurnWriter``) and its WebSocket
messages (``ops.serving.FrameWriter``), over real sockets: a response's head and body leave in
one segment, the messages one turn of the event loop sends leave together, and nothing written
waits for later work."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any, cast

import pytest
from uvicorn import Config, Server
from websockets.exceptions import ConnectionClosedOK
from websockets.sync.client import ClientConnection, connect

from dealbase.ops.serving import HeadLimits, HttpProtocol, WebSocketProtocol
from tests.support import free_port

STREAM_PAUSE_SECONDS = 0.5
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
        await asyncio.sleep(STREAM_PAUSE_SECONDS)
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
            await asyncio.sleep(STREAM_PAUSE_SECONDS)
            await send({"type": "websocket.send", "text": "late"})
        elif asked == "bye":
            await send({"type": "websocket.send", "text": "last"})
            await send({"type": "websocket.close", "code": 1000, "reason": "bye"})
            return
        else:
            for number in range(int(asked)):
                await send({"type": "websocket.send", "text": f"{number:04d}" * 50})


@pytest.fixture(scope="module")
def address() -> Iterator[tuple[str, int]]:
    port = free_port()
    config = Config(
        _answer,
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="off",
        http=cast(Any, partial(HttpProtocol, head_limits=HeadLimits(5.0, 16_384))),
        ws=cast(Any, WebSocketProtocol),
    )
    server = Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield ("127.0.0.1", port)
    server.should_exit = True
    thread.join(timeout=10)


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
    with socket.create_connection(address, timeout=5) as client:
        for _ in range(20):
            client.sendall(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            answer = _read_until(client, b"served")
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")

        assert _data_segments_received(client) == 20


def test_a_head_whose_body_comes_later_is_sent_at_once(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=5) as client:
        client.sendall(b"GET /streamed HTTP/1.1\r\nhost: test\r\n\r\n")
        started = time.monotonic()
        head = _read_until(client, b"\r\n\r\n")
        head_seconds = time.monotonic() - started
        rest = _read_until(client, b"0\r\n\r\n")

    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert head_seconds < STREAM_PAUSE_SECONDS / 2
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
    return connect(f"ws://{host}:{port}/", open_timeout=5, close_timeout=5)


def test_the_messages_one_turn_sends_arrive_together_in_one_segment(
    address: tuple[str, int],
) -> None:
    with _websocket(address) as websocket:
        assert _data_segments_received(websocket.socket) == 1  # the handshake's answer
        websocket.send("20")
        received = [websocket.recv(timeout=5) for _ in range(20)]

        assert received == [f"{number:04d}" * 50 for number in range(20)]
        assert _data_segments_received(websocket.socket) == 2


def test_a_message_sent_alone_leaves_at_once(address: tuple[str, int]) -> None:
    with _websocket(address) as websocket:
        for _ in range(5):
            started = time.monotonic()
            websocket.send("1")
            assert websocket.recv(timeout=5) == "0000" * 50
            assert time.monotonic() - started < STREAM_PAUSE_SECONDS / 2
        websocket.send("late")
        assert websocket.recv(timeout=5) == "late"


def test_a_close_follows_the_messages_sent_before_it(address: tuple[str, int]) -> None:
    with _websocket(address) as websocket:
        websocket.send("bye")
        assert websocket.recv(timeout=5) == "last"
        with pytest.raises(ConnectionClosedOK) as closed:
            websocket.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "bye")
