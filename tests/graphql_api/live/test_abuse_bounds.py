"""What one client may take of a live connection, in process: WebSockets held before their
introduction (per client address and per process), operations under the key's rate limits as
requests are, and a client's mistakes answered as its own (coded errors, no traceback). The
same bounds against a real ``dealbase serve``, and those only a real socket shows (a message's
size before it is assembled, a client that never reads), are in tests/ops/test_live_abuse.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from structlog.testing import capture_logs

from dealbase.app import create_app
from dealbase.config import Settings
from tests.graphql_api.live_support import BOARD, PROTOCOL, LiveSocket, live_socket
from tests.support import FakeClock, TenantWorld


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
