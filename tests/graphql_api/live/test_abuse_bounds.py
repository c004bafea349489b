"""What one client may take of a live connection, in process: WebSockets held before their
introduction (per client address and per process, and given back by one that never reads),
operations under the key's rate limits as requests are, and a client's mistakes answered as its
own (coded errors, no traceback). The same bounds against a real ``dealbase serve``, and those
only a real socket shows (a message's size before it is assembled, a subscriber that never
reads), are in tests/ops/test_live_abuse.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.testing import capture_logs

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.graphql_api.live import websocket as live_websocket
from tests.graphql_api.live_support import (
    BOARD,
    PROTOCOL,
    WAIT_SECONDS,
    LiveSocket,
    live_socket,
)
from tests.support import FakeClock, LoopClock, TenantWorld

# The fronted service's time for connection_init, in seconds of its loop's clock.
INIT_TIMEOUT_S = 0.3
# How far before a time runs out the tests look that it has not yet.
JUST_BEFORE_S = 0.01


@pytest.fixture(scope="module")
def wary(settings: Settings) -> Iterator[TestClient]:
    """A service that holds one unintroduced WebSocket per address, two in all."""
    app = create_app(
        settings.model_copy(
            update={"live_unintroduced_per_address": 1, "live_unintroduced_per_process": 2}
        )
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_a_second_socket_of_an_address_before_the_first_introduced_itself_is_refused_429(
    wary: TestClient, world: TenantWorld
) -> None:
    with wary.websocket_connect("/graphql", subprotocols=[PROTOCOL]) as session:
        first = LiveSocket(session)
        first.send({"type": "ping"})
        assert first.receive() == {"type": "pong"}  # it is open, and counted
        with (
            pytest.raises(WebSocketDenialResponse) as refused,
            wary.websocket_connect("/graphql", subprotocols=[PROTOCOL]),
        ):
            pass
        # Introduced, it no longer counts: the next socket opens.
        assert first.init(world.key.headers) == {"type": "connection_ack"}
        with live_socket(wary, init=world.key.headers) as second:
            second.subscribe("1", BOARD)
            assert second.next_data("1")["pipelineBoard"]["steps"]

    assert refused.value.status_code == 429
    assert refused.value.headers["content-type"] == "application/problem+json"
    assert refused.value.headers["retry-after"] == "1"
    assert b'"code":"too_many_connections"' in refused.value.content


def test_a_socket_that_leaves_before_its_introduction_is_no_longer_counted(
    wary: TestClient, world: TenantWorld
) -> None:
    for _ in range(3):
        with wary.websocket_connect("/graphql", subprotocols=[PROTOCOL]) as session:
            LiveSocket(session).send({"type": "ping"})
            assert LiveSocket(session).receive() == {"type": "pong"}
    with live_socket(wary, init=world.key.headers) as socket:
        socket.subscribe("1", BOARD)
        assert socket.next_data("1")["pipelineBoard"]["steps"]


class _Front:
    """A front of the tests' own before the app, as a proxy stands before it: a WebSocket's
    ``X-Peer`` header is the client address the app sees, and one with ``X-Never-Reads`` reads
    nothing the server sends it after the handshake: each message sent to it (``held``, by
    type) waits for ever, as a write to a client whose socket is full does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.held: list[str] = []
        self._changed = threading.Condition()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            headers = dict(scope["headers"])
            peer = headers.get(b"x-peer")
            if peer is not None:
                scope = {**scope, "client": (peer.decode(), 50000)}
            if b"x-never-reads" in headers:
                send = partial(self._unread, send)
        await self.app(scope, receive, send)

    async def _unread(self, send: Send, message: Message) -> None:
        if message["type"] == "websocket.accept":
            await send(message)
            return
        with self._changed:
            self.held.append(message["type"])
            self._changed.notify_all()
        await asyncio.Event().wait()

    def wait_until_held(self, kind: str) -> None:
        """Returns once the server waits to send a message of ``kind`` to a never-reader."""
        with self._changed:
            assert self._changed.wait_for(lambda: kind in self.held, timeout=WAIT_SECONDS), (
                f"the server sent no {kind} in {WAIT_SECONDS} s: {self.held}"
            )


@dataclass(frozen=True)
class _Fronted:
    client: TestClient
    front: _Front


@pytest.fixture(scope="module")
def loop_clock() -> LoopClock:
    return LoopClock()


@pytest.fixture(scope="module")
def fronted(settings: Settings, loop_clock: LoopClock) -> Iterator[_Fronted]:
    """A service that holds one unintroduced WebSocket per address, two in all, behind a
    ``_Front``, on an event loop whose clock only the tests move."""
    app = create_app(
        settings.model_copy(
            update={
                "live_unintroduced_per_address": 1,
                "live_unintroduced_per_process": 2,
                "live_init_timeout_seconds": INIT_TIMEOUT_S,
            }
        )
    )
    front = _Front(app)
    with TestClient(
        front, raise_server_exceptions=False, backend_options={"loop_factory": loop_clock.new_loop}
    ) as client:
        yield _Fronted(client, front)


@contextmanager
def _unintroduced(client: TestClient, peer: str) -> Iterator[LiveSocket]:
    """A WebSocket of client address ``peer`` that has not sent connection_init (yet)."""
    with client.websocket_connect(
        "/graphql", subprotocols=[PROTOCOL], headers={"X-Peer": peer}
    ) as session:
        socket = LiveSocket(session)
        socket.send({"type": "ping"})
        assert socket.receive() == {"type": "pong"}  # it is open, and counted
        yield socket


def _refused(client: TestClient, peer: str) -> WebSocketDenialResponse:
    """The refusal of a WebSocket of client address ``peer`` (fails if it opens)."""
    with (
        pytest.raises(WebSocketDenialResponse) as refused,
        client.websocket_connect("/graphql", subprotocols=[PROTOCOL], headers={"X-Peer": peer}),
    ):
        pass
    return refused.value


def test_a_socket_of_a_new_address_is_refused_429_once_the_process_holds_its_cap(
    fronted: _Fronted, world: TenantWorld
) -> None:
    client = fronted.client
    with _unintroduced(client, "192.0.2.1") as first, _unintroduced(client, "192.0.2.2"):
        # The third address holds no socket: only the process's cap refuses it.
        refused = _refused(client, "192.0.2.3")
        # Introduced, the first no longer counts: the third address's socket opens.
        assert first.init(world.key.headers) == {"type": "connection_ack"}
        with _unintroduced(client, "192.0.2.3"):
            pass

    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "1"
    assert b'"code":"too_many_connections"' in refused.content


def test_a_socket_pinging_before_its_introduction_but_never_reading_gives_its_place_back(
    fronted: _Fronted, loop_clock: LoopClock
) -> None:
    """Its pong waits for ever, and so does the close frame of its init timeout: the close gives
    up after its time (``_CLOSE_SECONDS``) and the connection gives its place back, which it
    held, before 9f161bd, until the kernel gave up on the connection."""
    client, front = fronted.client, fronted.front
    peer = "192.0.2.9"
    opened = loop_clock.now()
    given_up = opened + INIT_TIMEOUT_S + live_websocket._CLOSE_SECONDS
    with client.websocket_connect(
        "/graphql", subprotocols=[PROTOCOL], headers={"X-Peer": peer, "X-Never-Reads": "1"}
    ) as session:
        LiveSocket(session).send({"type": "ping"})
        front.wait_until_held("websocket.send")  # the pong, which the client never reads
        loop_clock.advance_to(opened + INIT_TIMEOUT_S)
        front.wait_until_held("websocket.close")  # the init timeout's close frame
        still_held = _refused(client, peer)
        loop_clock.advance_to(given_up - JUST_BEFORE_S)
        held_until_the_close_gives_up = _refused(client, peer)
        loop_clock.advance_to(given_up)
        with _unintroduced(client, peer):
            pass

    assert still_held.status_code == held_until_the_close_gives_up.status_code == 429


def test_each_subscribe_spends_the_keys_rate_and_a_refusal_is_an_error_message_not_a_close(
    settings: Settings, world: TenantWorld
) -> None:
    """Burst 3 on a clock that stands still: the connection spends one, two subscribes pass,
    the third is refused with the code and when to retry; the connection stays open."""
    limited = settings.model_copy(update={"rate_limit_key": "1/s", "rate_limit_key_burst": 3})
    app = create_app(limited, clock=FakeClock())
    with (
        TestClient(app, raise_server_exceptions=False) as client,
        live_socket(client, init=world.key.headers) as socket,
    ):
        for operation_id in ("1", "2"):
            socket.subscribe(operation_id, BOARD)
            socket.next_data(operation_id)
        socket.subscribe("3", BOARD)
        refused = socket.receive()
        socket.send({"type": "ping"})
        still_open = socket.receive()

    assert (refused["id"], refused["type"]) == ("3", "error")
    (error,) = refused["payload"]
    assert error["extensions"] == {"code": "rate_limited", "retry_after_seconds": 1}
    assert still_open == {"type": "pong"}


@pytest.mark.parametrize(
    ("document", "kind"),
    [("{ customers(first: 1) { totalCount } }", "query"), ("mutation { __typename }", "mutation")],
)
def test_a_query_or_mutation_sent_as_a_subscription_is_a_coded_error_and_logs_no_error(
    client: TestClient, world: TenantWorld, document: str, kind: str
) -> None:
    with capture_logs() as logs, live_socket(client, init=world.key.headers) as socket:
        socket.subscribe("1", document)
        refused = socket.receive()
        socket.subscribe("2", BOARD)
        served = socket.next_data("2")

    assert (refused["id"], refused["type"]) == ("1", "error")
    (error,) = refused["payload"]
    assert error["extensions"] == {"code": "operation_not_subscription"}
    assert (
        error["message"] == f"Only subscriptions are served here: send a {kind} to POST /graphql."
    )
    assert served["pipelineBoard"]["steps"]
    assert [log for log in logs if log["log_level"] in ("error", "critical")] == []


def test_a_query_sent_to_the_event_stream_is_a_coded_error(
    client: TestClient, world: TenantWorld
) -> None:
    response = client.post(
        "/graphql/stream",
        json={"query": "{ customers(first: 1) { totalCount } }"},
        headers=world.key.headers,
    )
    assert response.status_code == 200
    assert '"code":"operation_not_subscription"' in response.text


def test_a_key_with_white_space_around_it_in_connection_init_is_the_key(
    client: TestClient, world: TenantWorld
) -> None:
    padded = {name: f" {value}\t" for name, value in world.key.headers.items()}
    with live_socket(client, init=padded) as socket:
        socket.subscribe("1", BOARD)
        assert socket.next_data("1")["pipelineBoard"]["steps"]
