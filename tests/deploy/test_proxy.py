"""The proxy deploy/ ships in front of the API (deploy/nginx/nginx.conf), run by the machine's nginx
in front of a real uvicorn: it bounds a request's head in time and size and answers a refused
head as the API's problem document, and it passes the rest through as the API needs it
(WebSockets, unbuffered Server-Sent Events, bodies the API refuses itself, the client's address).

Each test waits for what it expects (a close, an answer, an event), never for a time: the header
timeout tests run a copy whose timeout is 1 s rather than 10 s (tests.deploy.proxy.copy_for_test:
the one change to the file besides its addresses and writable paths), so that they end sooner.
"""

from __future__ import annotations

import re
import select
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import uvicorn
from websockets.sync.client import connect as websocket_connect

from dealbase.config import Settings
from dealbase.edge.problems import problem_document
from dealbase.edge.request_edge import MAX_BATCH_BODY_BYTES
from tests.deploy.proxy import (
    APP_BODY_CAP,
    ECHOED,
    PATIENCE_S,
    Proxied,
    directive,
    nginx_binary,
    proxied,
    wait_for,
)

# The bounds the API's refusals state (edge/problems.py's documents, the OpenAPI's 414 and 431).
MAX_LINE_BYTES = 8192
MAX_HEAD_BYTES = 32768
REQUEST_ID = re.compile(r"^[0-9a-f]{32}$")
HEAD_END = b"\r\n\r\n"

Answer = tuple[int, dict[str, str], bytes]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """The shipped file as it is (but for its addresses and writable paths)."""
    nginx_binary()
    with proxied(tmp_path_factory.mktemp("proxy")) as running:
        yield running


@pytest.fixture
def impatient_proxy(tmp_path: Path) -> Iterator[Proxied]:
    """The shipped file with a header timeout of 1 s rather than 10 s."""
    nginx_binary()
    with proxied(tmp_path, header_timeout_s=1) as running:
        yield running


def _connect(proxy: Proxied) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=PATIENCE_S)


def _read_to_the_close(connection: socket.socket) -> bytes:
    """What the proxy writes until it closes the connection (a reset after its answer counts
    as the close)."""
    received = b""
    while True:
        try:
            chunk = connection.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


def _parsed(raw: bytes) -> Answer:
    head, _, body = raw.partition(HEAD_END)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def _answer_to(proxy: Proxied, sent: bytes) -> Answer:
    """The proxy's answer to ``sent`` (which may be a head without its end), read to the close."""
    with _connect(proxy) as connection:
        connection.sendall(sent)
        return _parsed(_read_to_the_close(connection))


def _assert_problem(answer: Answer, status: int, code: str, title: str) -> None:
    """The answer is the problem the API would write: its members, its media type, and its
    request id in X-Request-Id; nginx's version is not in it."""
    got_status, headers, body = answer
    assert got_status == status, answer
    assert headers["content-type"] == "application/problem+json"
    assert headers["server"] == "nginx"
    document = orjson.loads(body)
    request_id = headers["x-request-id"]
    assert REQUEST_ID.match(request_id), request_id
    assert document == problem_document(status, code, title, document["detail"], request_id)


def _reached_the_app(proxy: Proxied, marker: str) -> bool:
    return any(marker in scope["path"] for scope in proxy.app.scopes)


def _get(path: str, *headers: bytes, end: bool = True) -> bytes:
    head = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: dealbase\r\nConnection: close\r\n"
    return head + b"".join(header + b"\r\n" for header in headers) + (b"\r\n" if end else b"")


def _closed_unanswered(connection: socket.socket, trickle: bytes | None) -> bytes:
    """Sends ``trickle`` (a header, never the head's end) whenever the proxy has written nothing,
    until it closes the connection; returns what it wrote."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        readable, _, _ = select.select([connection], [], [], 0.1)
        if readable:
            return _read_to_the_close(connection)
        if trickle is not None:
            try:
                connection.sendall(trickle)
            except (BrokenPipeError, ConnectionResetError):
                return _read_to_the_close(connection)
    pytest.fail(f"the proxy kept the connection open for {PATIENCE_S} s")


def test_a_trickled_head_is_closed_unanswered_at_the_header_timeout_and_never_reaches_the_app(
    impatient_proxy: Proxied,
) -> None:
    marker = f"trickled-{uuid.uuid4().hex}"
    with _connect(impatient_proxy) as connection:
        connection.sendall(_get(f"/{marker}", end=False))
        written = _closed_unanswered(connection, trickle=b"X-Trickle: 1\r\n")

    # nginx closes a late head without an answer (it never writes a 408 there).
    assert written == b""
    assert not _reached_the_app(impatient_proxy, marker)


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(
    impatient_proxy: Proxied,
) -> None:
    with _connect(impatient_proxy) as connection:
        written = _closed_unanswered(connection, trickle=None)

    assert written == b""
    assert impatient_proxy.app.scopes == []


def test_a_head_under_the_limits_is_served(proxy: Proxied) -> None:
    # Three headers of 7,000 bytes: each line under 8 KiB, the head under 32 KiB.
    headers = [f"X-Large-{n}: {'v' * 7000}".encode() for n in range(3)]

    status, _, body = _answer_to(proxy, _get("/served", *headers))

    assert status == 200, body
    seen = orjson.loads(body)["headers"]
    assert [len(seen[f"x-large-{n}"]) for n in range(3)] == [7000] * 3


def test_a_header_over_its_limit_is_answered_431_before_the_head_ends(proxy: Proxied) -> None:
    marker = f"long-header-{uuid.uuid4().hex}"
    sent = _get(f"/{marker}", b"X-Long: " + b"v" * MAX_LINE_BYTES, end=False)

    answer = _answer_to(proxy, sent)

    _assert_problem(
        answer, 431, "request_header_fields_too_large", "Request header fields too large"
    )
    assert not _reached_the_app(proxy, marker)


def test_many_small_headers_over_the_heads_limit_are_answered_431(proxy: Proxied) -> None:
    marker = f"many-headers-{uuid.uuid4().hex}"
    headers = [f"X-Small-{n}: {'v' * 90}".encode() for n in range(MAX_HEAD_BYTES // 100 + 10)]

    answer = _answer_to(proxy, _get(f"/{marker}", *headers, end=False))

    _assert_problem(
        answer, 431, "request_header_fields_too_large", "Request header fields too large"
    )
    assert not _reached_the_app(proxy, marker)


def test_a_target_over_8_kib_is_answered_414(proxy: Proxied) -> None:
    marker = f"long-target-{uuid.uuid4().hex}"
    answer = _answer_to(proxy, b"GET /" + marker.encode() + b"?q=" + b"a" * MAX_LINE_BYTES)

    _assert_problem(answer, 414, "uri_too_long", "URI too long")
    assert not _reached_the_app(proxy, marker)


@pytest.mark.parametrize(
    "sent",
    [b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + HEAD_END, b"HELLO THERE" + HEAD_END],
    ids=["tls-hello", "no-target"],
)
def test_bytes_that_are_not_http_are_answered_400(proxy: Proxied, sent: bytes) -> None:
    _assert_problem(_answer_to(proxy, sent), 400, "malformed_request", "Malformed request")


def test_a_body_over_the_apis_cap_reaches_the_app_whose_413_comes_back(proxy: Proxied) -> None:
    body = b"x" * (2 * APP_BODY_CAP)

    with httpx.Client(timeout=PATIENCE_S) as client:
        answer = client.post(f"http://127.0.0.1:{proxy.address[1]}/upload", content=body)

    assert answer.status_code == 413
    assert answer.json() == {"code": "payload_too_large", "received": len(body)}


def test_a_body_the_proxy_refuses_itself_is_answered_as_a_problem(proxy: Proxied) -> None:
    declared = _body_limit_bytes() + 1
    sent = b"POST /upload HTTP/1.1\r\nHost: dealbase\r\nContent-Length: %d\r\n\r\n" % declared

    _assert_problem(_answer_to(proxy, sent), 413, "payload_too_large", "Payload too large")


def test_a_websocket_with_its_subprotocol_goes_through(proxy: Proxied) -> None:
    url = f"ws://127.0.0.1:{proxy.address[1]}/graphql"

    with websocket_connect(url, subprotocols=["graphql-transport-ws"]) as websocket:  # type: ignore[list-item]
        websocket.send("hello")
        echoed = websocket.recv(timeout=PATIENCE_S)

        assert websocket.subprotocol == "graphql-transport-ws"
    assert echoed == ECHOED + "hello"


def test_an_sse_event_reaches_the_client_before_its_response_ends(proxy: Proxied) -> None:
    request = _get("/graphql/stream", b"Accept: text/event-stream")
    received = b""
    with _connect(proxy) as connection:
        connection.sendall(request)

        def first_event_in() -> bool:
            nonlocal received
            received += connection.recv(65536)
            return b"data: first\n\n" in received

        wait_for(first_event_in, f"no first event: {received!r}")
        # The app sends the second event, and ends the response, only now.
        assert b"data: second" not in received
        proxy.app.release.set()
        received += _read_to_the_close(connection)

    assert b"data: second\n\n" in received


def test_the_app_sees_the_clients_address_and_not_one_it_claims(proxy: Proxied) -> None:
    # From another loopback address than the proxy's own, which the app trusts.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=transport, timeout=PATIENCE_S) as client:
        answer = client.get(
            f"http://127.0.0.1:{proxy.address[1]}/who", headers={"X-Forwarded-For": "192.0.2.1"}
        )

    seen = answer.json()
    assert seen["client"] == "127.0.0.2"
    assert seen["headers"]["x-forwarded-for"] == "192.0.2.1, 127.0.0.2"
    assert seen["headers"]["x-forwarded-proto"] == "http"


def test_the_app_gets_the_clients_request_id_when_it_would_keep_it_else_the_proxys(
    proxy: Proxied,
) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{proxy.address[1]}", timeout=PATIENCE_S) as c:
        kept = c.get("/ids", headers={"X-Request-Id": "client-id.1:2"}).json()
        replaced = c.get("/ids", headers={"X-Request-Id": "not sane!"}).json()
        given = c.get("/ids").json()

    assert kept["headers"]["x-request-id"] == "client-id.1:2"
    assert REQUEST_ID.match(replaced["headers"]["x-request-id"])
    assert REQUEST_ID.match(given["headers"]["x-request-id"])


# What the file says, against what the API does.


def _seconds(value: str) -> float:
    assert value.endswith("s"), value
    return float(value[:-1])


def _body_limit_bytes() -> int:
    (value,) = directive("client_max_body_size")
    assert value.endswith("m"), value
    return int(value[:-1]) * 1024 * 1024


def test_the_proxy_lets_through_every_body_the_api_may_refuse_itself() -> None:
    assert _body_limit_bytes() > MAX_BATCH_BODY_BYTES


def test_the_header_bounds_are_those_the_problems_state() -> None:
    (buffers,) = directive("large_client_header_buffers")
    count, size = buffers.split()

    assert int(size.removesuffix("k")) * 1024 == MAX_LINE_BYTES
    assert int(count) * MAX_LINE_BYTES == MAX_HEAD_BYTES
    stated = " ".join(directive("return"))
    assert f"longer than {MAX_LINE_BYTES} bytes" in stated
    assert f"longer than {MAX_HEAD_BYTES} bytes" in stated


def test_live_connections_are_pinged_more_often_than_the_proxy_waits_for_the_api() -> None:
    keepalive_s = Settings.model_fields["live_keepalive_seconds"].default

    assert all(_seconds(value) > 2 * keepalive_s for value in directive("proxy_read_timeout"))


def test_the_proxy_lets_a_kept_connection_go_before_uvicorn_does() -> None:
    (kept_s,) = [_seconds(value) for value in directive("keepalive_timeout")[1:]]

    assert kept_s < uvicorn.Config("dealbase.app:create_app").timeout_keep_alive


def test_a_graceful_stop_lets_a_response_in_progress_end_and_takes_no_new_connection(
    tmp_path: Path,
) -> None:
    nginx_binary()
    with proxied(tmp_path) as running, _connect(running) as connection:
        connection.sendall(_get("/graphql/stream", b"Accept: text/event-stream"))
        received = b""

        def first_event_in() -> bool:
            nonlocal received
            received += connection.recv(65536)
            return b"data: first\n\n" in received

        wait_for(first_event_in, f"no first event: {received!r}")
        # SIGQUIT: what compose and Kubernetes send the official image.
        running.stop_gracefully()
        wait_for(lambda: not _accepts(running), "nginx still accepts connections")
        running.app.release.set()
        received += _read_to_the_close(connection)

    assert b"data: second\n\n" in received


def _accepts(proxy: Proxied) -> bool:
    try:
        socket.create_connection(proxy.address, timeout=PATIENCE_S).close()
    except OSError:
        return False
    return True
