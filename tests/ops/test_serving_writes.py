"""How the HTTP server writes its answers (``ops.serving.TurnWriter``), over real sockets: a
response's head and body leave in one segment, and nothing written waits for later work."""

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

from dealbase.ops.serving import HeadLimits, HttpProtocol
from tests.support import free_port

STREAM_PAUSE_SECONDS = 0.5
# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, the segments received that carried data.
TCP_INFO_DATA_SEGMENTS_IN = 152


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
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
