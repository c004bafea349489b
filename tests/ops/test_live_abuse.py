"""The live surface against a real ``dealbase serve``, attacked as a hostile client would: each
test runs one attack of issue 52 and checks the bound that holds it (docs/security.md, "Live
connections"), so a change of the serving layer keeps them.

- WebSockets that never introduce themselves, each sending an unfinished message of 15 MiB
  compressed to a few kilobytes: refused as the frames arrive, the worker's memory stays.
- Unintroduced sockets beyond the per-address cap: refused 429 before they open.
- Operations over one socket: admitted by the key's rate limit, as requests are.
- Queries sent as subscriptions and invalid UTF-8 before the introduction: client errors,
  answered and logged as such, no traceback.
- A subscriber that never reads, over a WebSocket and over an event stream: closed once the
  server could not write for the write timeout, its slot given back.
- A request body that stops arriving: 408, and the connection closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.tenancy.scope import Rate
from tests.support import (
    RATES_NO_TEST_MEETS,
    ServeProcess,
    TenantWorld,
    build_tenant,
    dealbase_served,
)

API = "/api/v1/integration"
BOARD = "subscription { pipelineBoard { cursor } }"
CHANGES = "subscription { changes { cursor record } }"
WRITE_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2
# The memory one worker may gain from the attack of unintroduced compressed messages.
MEMORY_BOUND_BYTES = 50 * 1024 * 1024
# How long a test waits for what it waits for before it fails (never part of what it checks).
GIVE_UP_S = 60.0


@pytest.fixture(scope="module")
def served(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """One worker (its memory is the process's), the default live limits but one connection per
    key, short write and body timeouts, and rates no test meets but the one it sets."""
    environment = {
        "DEALBASE_LOG_LEVEL": "info",
        "DEALBASE_LIVE_POLL_SECONDS": "600",
        "DEALBASE_LIVE_CONNECTIONS_PER_KEY": "1",
        "DEALBASE_LIVE_BUFFER_EVENTS": "100000",
        "DEALBASE_WRITE_TIMEOUT_SECONDS": str(WRITE_TIMEOUT_S),
        "DEALBASE_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_S),
        **RATES_NO_TEST_MEETS,
    }
    directory = tmp_path_factory.mktemp("abuse")
    with dealbase_served(directory, database_url, environment, "--workers", "1") as server:
        yield server


def _address(server: ServeProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


TEXT, CONTINUATION = 0x1, 0x0


def _frame(opcode: int, payload: bytes, *, fin: bool = True, compressed: bool = False) -> bytes:
    """A client's frame (masked, as a client's must be); ``compressed`` sets RSV1, which marks
    a permessage-deflate message."""
    first = (0x80 if fin else 0) | (0x40 if compressed else 0) | opcode
    size = len(payload)
    if size < 126:
        head = bytes([first, 0x80 | size])
    elif size < 1 << 16:
        head = bytes([first, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([first, 0x80 | 127]) + size.to_bytes(8, "big")
    mask = os.urandom(4)
    key = int.from_bytes((mask * (size // 4 + 1))[:size], "big")
    masked = (int.from_bytes(payload, "big") ^ key).to_bytes(size, "big") if size else b""
    return head + mask + masked


def _resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _raw_upgrade(
    server: ServeProcess, *, extensions: str = "", receive_buffer: int | None = None
) -> tuple[socket.socket, bytes]:
    """A TCP connection that asked for a graphql-transport-ws WebSocket; the server's answer's
    head (and whatever came with it)."""
    raw = socket.socket()
    if receive_buffer is not None:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    raw.settimeout(GIVE_UP_S)
    raw.connect(_address(server))
    head = [
        "GET /graphql HTTP/1.1",
        f"Host: {server.base_url.removeprefix('http://')}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: graphql-transport-ws",
    ]
    if extensions:
        head.append(f"Sec-WebSocket-Extensions: {extensions}")
    raw.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        part = raw.recv(65536)
        if not part:
            break
        answer += part
    return raw, answer


def _until_closed(raw: socket.socket) -> bytes:
    """What the server sends until it closes (or resets) the connection; fails the test if it
    does not within GIVE_UP_S."""
    received = b""
    try:
        while part := raw.recv(65536):
            received += part
    except ConnectionResetError:
        pass
    return received


def test_unintroduced_sockets_sending_compressed_15_mib_messages_leave_the_worker_memory(
    served: ServeProcess,
) -> None:
    """60 sockets ask for compression (refused) and send, unintroduced, the first fragment of a
    15 MiB message of one repeated byte, deflated to about 15 kB, then its continuations, each
    socket held open until the server closes it: none is inflated or assembled, each is closed
    as a protocol error (1002)."""
    before = _resident_bytes(served.process.pid)
    compressor = zlib.compressobj(wbits=-15)
    deflated = compressor.compress(b"a" * (15 * 1024 * 1024)) + compressor.flush(zlib.Z_SYNC_FLUSH)
    attack = _frame(TEXT, deflated[:8192], fin=False, compressed=True) + _frame(
        CONTINUATION, deflated[8192:], fin=False
    )
    opened: list[socket.socket] = []
    peak = before
    try:
        for _ in range(60):
            raw, answer = _raw_upgrade(served, extensions="permessage-deflate")
            opened.append(raw)
            assert b" 101 " in answer.split(b"\r\n", 1)[0], answer
            assert b"permessage-deflate" not in answer.lower()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                raw.sendall(attack)
            peak = max(peak, _resident_bytes(served.process.pid))
        codes = []
        for raw in opened:
            closing = _until_closed(raw)
            codes.append(int.from_bytes(closing[2:4], "big") if closing[:1] == b"\x88" else None)
            peak = max(peak, _resident_bytes(served.process.pid))
    finally:
        for raw in opened:
            raw.close()

    assert codes == [1002] * 60
    assert peak - before <= MEMORY_BOUND_BYTES, f"+{(peak - before) / 2**20:.0f} MiB"


def test_unintroduced_sockets_past_the_addresss_cap_are_refused_429_until_the_init_timeout(
    served: ServeProcess,
) -> None:
    """16 sockets that say nothing hold the address's places; the 17th is refused before it
    opens; the init timeout closes the 16 (4408), and the address may open sockets again."""
    silent = [_raw_upgrade(served) for _ in range(16)]
    try:
        assert all(b" 101 " in answer.split(b"\r\n", 1)[0] for _, answer in silent)
        refused, answer = _raw_upgrade(served)
        with refused:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 429 "), head
            assert b"retry-after: 1" in head.lower()
            assert b"too_many_connections" in body + _until_closed(refused)
        for raw, _ in silent:
            closing = _until_closed(raw)
            assert int.from_bytes(closing[2:4], "big") == 4408
    finally:
        for raw, _ in silent:
            raw.close()
    again, answer = _raw_upgrade(served)
    with again:
        assert b" 101 " in answer.split(b"\r\n", 1)[0]


def test_an_uncompressed_message_past_the_limit_is_refused_1009_as_its_frames_arrive(
    served: ServeProcess,
) -> None:
    raw, answer = _raw_upgrade(served)
    with raw:
        assert b" 101 " in answer.split(b"\r\n", 1)[0]
        header = _frame(TEXT, b"a" * (2 * 1024 * 1024))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            raw.sendall(header)
        closing = _until_closed(raw)
    # A close frame: opcode 8, then its code.
    assert closing[:1] == b"\x88"
    assert int.from_bytes(closing[2:4], "big") == 1009


def test_invalid_utf8_before_the_introduction_is_closed_1007_and_logged_without_a_traceback(
    served: ServeProcess,
) -> None:
    log_before = len(served.output())
    for _ in range(20):
        raw, answer = _raw_upgrade(served)
        with raw:
            assert b" 101 " in answer.split(b"\r\n", 1)[0]
            raw.sendall(_frame(TEXT, b'{"type": "\xff\xfe"}'))
            closing = _until_closed(raw)
        assert closing[:1] == b"\x88"
        assert int.from_bytes(closing[2:4], "big") == 1007
    written = served.output()[log_before:]
    assert "Traceback" not in written
    assert '"level": "error"' not in written and "[error" not in written


def _websocket(server: ServeProcess, world: TenantWorld) -> ClientConnection:
    socket_ = connect(
        server.base_url.replace("http://", "ws://") + "/graphql",
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        open_timeout=GIVE_UP_S,
    )
    socket_.send(json.dumps({"type": "connection_init", "payload": world.key.headers}))
    assert json.loads(socket_.recv(timeout=GIVE_UP_S)) == {"type": "connection_ack"}
    return socket_


def _reply(socket_: ClientConnection, operation_id: str) -> dict[str, Any]:
    while True:
        message: dict[str, Any] = json.loads(socket_.recv(timeout=GIVE_UP_S))
        if message.get("id") == operation_id:
            return message


def test_subscribe_operations_over_one_socket_are_held_to_the_keys_rate(
    served: ServeProcess, database: Database
) -> None:
    """10/s, burst 20: subscribe and complete as fast as the socket goes for 200 operations;
    at most the burst (less the connection's unit) plus 10 a second of the time taken pass,
    and each refusal is an error message with its code, the socket still open."""
    world = build_tenant(database)
    admin.set_key_rate(database, world.key.key_id, Rate(10, 20))
    admitted = refused = 0
    with _websocket(served, world) as socket_:
        started = time.monotonic()
        for n in range(200):
            operation_id = str(n)
            socket_.send(
                json.dumps({"id": operation_id, "type": "subscribe", "payload": {"query": BOARD}})
            )
            reply = _reply(socket_, operation_id)
            if reply["type"] == "next":
                admitted += 1
                socket_.send(json.dumps({"id": operation_id, "type": "complete"}))
            else:
                assert reply["type"] == "error", reply
                assert reply["payload"][0]["extensions"]["code"] == "rate_limited"
                refused += 1
        elapsed = time.monotonic() - started
        socket_.send(json.dumps({"type": "ping"}))
        assert json.loads(socket_.recv(timeout=GIVE_UP_S)) == {"type": "pong"}
    assert admitted + refused == 200
    assert refused > 0
    assert admitted <= 20 - 1 + 10 * elapsed + 1, (admitted, elapsed)


def test_queries_sent_as_subscriptions_are_coded_errors_and_log_no_traceback(
    served: ServeProcess, database: Database
) -> None:
    world = build_tenant(database)
    log_before = len(served.output())
    with _websocket(served, world) as socket_:
        for n in range(50):
            query = {"query": "{ customers(first: 1) { totalCount } }"}
            socket_.send(json.dumps({"id": str(n), "type": "subscribe", "payload": query}))
            reply = _reply(socket_, str(n))
            assert reply["type"] == "error"
            assert reply["payload"][0]["extensions"]["code"] == "operation_not_subscription"
    written = served.output()[log_before:]
    assert "Traceback" not in written


def _many_changes(server: ServeProcess, world: TenantWorld, records: int) -> None:
    """``records`` customers with long notes, in batches: megabytes of changes."""
    note = "n" * 4000
    for start in range(0, records, 500):
        batch = [{"last_name": f"bulk {n}", "note": note} for n in range(start, start + 500)]
        response = httpx.post(
            f"{server.base_url}{API}/customers/batch",
            json={"operations": [{"op": "create", "data": item} for item in batch]},
            headers=world.key.headers,
            timeout=GIVE_UP_S,
        )
        assert response.status_code in (200, 201, 207), response.text


def _slot_given_back(open_another: Any) -> float:
    """Seconds until the key's only live connection is free again (another one is admitted)."""
    started = time.monotonic()
    while not open_another():
        assert time.monotonic() - started < GIVE_UP_S, "the connection was never given up"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_websocket_subscriber_that_never_reads_is_closed_and_its_slot_given_back(
    served: ServeProcess, database: Database
) -> None:
    world = build_tenant(database)
    raw, answer = _raw_upgrade(served, receive_buffer=4096)
    with raw:
        assert b" 101 " in answer.split(b"\r\n", 1)[0]
        init = {"type": "connection_init", "payload": world.key.headers}
        raw.sendall(_frame(TEXT, json.dumps(init).encode()))
        subscribe = {"id": "1", "type": "subscribe", "payload": {"query": CHANGES}}
        raw.sendall(_frame(TEXT, json.dumps(subscribe).encode()))
        # The acknowledgement, read: the connection holds the key's one slot from here. Then
        # nothing is read again.
        assert b"connection_ack" in raw.recv(4096)
        _many_changes(served, world, 2000)

        def another_connects() -> bool:
            with _websocket_or_refusal(served, world) as acknowledged:
                return acknowledged

        _slot_given_back(another_connects)
        # The server's end is gone too (reset by the kernel, or closed once what it had
        # written was read): what the client reads ends.
        _until_closed(raw)


class _websocket_or_refusal:
    """Whether a WebSocket of ``world``'s key is acknowledged (not refused for the key's
    connection limit)."""

    def __init__(self, server: ServeProcess, world: TenantWorld) -> None:
        self.server, self.world = server, world
        self.socket: ClientConnection | None = None

    def __enter__(self) -> bool:
        self.socket = connect(
            self.server.base_url.replace("http://", "ws://") + "/graphql",
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            open_timeout=GIVE_UP_S,
        )
        init = {"type": "connection_init", "payload": self.world.key.headers}
        self.socket.send(json.dumps(init))
        try:
            message = json.loads(self.socket.recv(timeout=GIVE_UP_S))
        except Exception:  # closed: refused
            return False
        return bool(message == {"type": "connection_ack"})

    def __exit__(self, *exc: object) -> None:
        if self.socket is not None:
            self.socket.close()


def test_an_event_stream_subscriber_that_never_reads_is_closed_and_its_slot_given_back(
    served: ServeProcess, database: Database
) -> None:
    world = build_tenant(database)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(GIVE_UP_S)
    raw.connect(_address(served))
    body = json.dumps({"query": CHANGES}).encode()
    headers = "".join(f"{name}: {value}\r\n" for name, value in world.key.headers.items())
    raw.sendall(
        b"POST /graphql/stream HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        + headers.encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with raw:
        assert b" 200 " in raw.recv(4096).split(b"\r\n", 1)[0]
        _many_changes(served, world, 2000)

        def another_streams() -> bool:
            with httpx.stream(
                "POST",
                f"{served.base_url}/graphql/stream",
                json={"query": BOARD},
                headers=world.key.headers,
                timeout=GIVE_UP_S,
            ) as response:
                return response.status_code == 200

        _slot_given_back(another_streams)


def test_a_request_body_that_stops_arriving_is_answered_408_and_the_connection_closed(
    served: ServeProcess, database: Database
) -> None:
    world = build_tenant(database)
    headers = "".join(f"{name}: {value}\r\n" for name, value in world.key.headers.items())
    with socket.create_connection(_address(served), timeout=GIVE_UP_S) as raw:
        raw.sendall(
            f"POST {API}/customers HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"{headers}Content-Length: 100\r\n\r\n".encode()
            + b'{"last_name": "tr'
        )
        answer = _until_closed(raw)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in head.lower()
    assert json.loads(body)["code"] == "request_timeout"
