"""Live subscriptions against `dealbase serve` itself: a change written through any worker
reaches a subscriber of another (each worker's LISTEN connection hears every worker's
announcement), a stream the client leaves frees its place, and SIGTERM tells WebSocket and
stream clients to reconnect at once instead of holding the server to its graceful timeout."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from websockets.sync.client import ClientConnection, connect

from dealbase.db.database import libpq_url
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.validation import validated
from dealbase.tenancy.scope import Scope
from tests.support import (
    SERVER_START_TIMEOUT_S,
    ServeProcess,
    TenantWorld,
    build_tenant,
    dealbase_served,
    wait_until,
)

API = "/api/v1/integration"
# Far off: a change that arrives comes by its announcement, not by the periodic read.
POLL_SECONDS = "600"
# The longest graceful timeout there is: a server that stops at all within SHUTDOWN_WAIT_S was
# not held to it.
SHUTDOWN_TIMEOUT_SECONDS = "600"
SHUTDOWN_WAIT_S = 60
CHANGES = "subscription ($after: String) { changes(after: $after) { cursor recordId } }"
BOARD = "subscription { pipelineBoard { cursor } }"


def _listeners(database_url: str) -> int:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
            " 'dealbase-listener' AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def _serve(
    directory: Path, database_url: str, workers: int, **settings: str
) -> Iterator[ServeProcess]:
    environment = {
        "DEALBASE_LIVE_POLL_SECONDS": POLL_SECONDS,
        **{f"DEALBASE_{name.upper()}": value for name, value in settings.items()},
    }
    with dealbase_served(directory, database_url, environment, "--workers", str(workers)) as served:
        # Each worker listens once its app has started.
        wait_until(
            lambda: _listeners(database_url) >= workers,
            "each worker listening for announcements",
            SERVER_START_TIMEOUT_S,
        )
        yield served


@pytest.fixture(scope="module")
def two_workers(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    directory = tmp_path_factory.mktemp("live")
    with _serve(directory, database_url, 2, live_connections_per_key="1") as served:
        yield served


@contextmanager
def _websocket(served: ServeProcess, world: TenantWorld) -> Iterator[ClientConnection]:
    with connect(
        served.base_url.replace("http://", "ws://") + "/graphql",
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        open_timeout=10,
    ) as socket:
        socket.send(json.dumps({"type": "connection_init", "payload": world.key.headers}))
        assert json.loads(socket.recv(timeout=10)) == {"type": "connection_ack"}
        yield socket


def _next(socket: ClientConnection) -> dict[str, Any]:
    while True:
        message: dict[str, Any] = json.loads(socket.recv(timeout=10))
        if message["type"] != "ping":
            return message


def test_a_change_written_through_any_worker_reaches_the_subscriber_before_the_next_is_written(
    two_workers: ServeProcess, database: Any
) -> None:
    """Each change arrives before the next write, which would have the subscriber's worker read
    its department anyway, and long before the periodic read: by its writer's announcement,
    which every worker hears."""
    world = build_tenant(database)
    with _websocket(two_workers, world) as socket:
        socket.send(json.dumps({"id": "c", "type": "subscribe", "payload": {"query": CHANGES}}))
        socket.send(json.dumps({"id": "b", "type": "subscribe", "payload": {"query": BOARD}}))
        # The board answers once the department's channel is ready, the changes joined to it.
        assert _next(socket)["id"] == "b"
        written = []
        for n in range(8):
            # A connection each: the kernel hands them to either worker.
            response = httpx.post(
                f"{two_workers.base_url}{API}/customers",
                json={"last_name": f"written {n}"},
                headers={**world.key.headers, "Connection": "close"},
            )
            assert response.status_code == 201, response.text
            message = _next(socket)
            written.append(response.json()["id"])
            assert message["payload"]["data"]["changes"]["recordId"] == written[-1]


def test_a_stream_the_client_leaves_frees_its_place(
    two_workers: ServeProcess, database: Any
) -> None:
    world = build_tenant(database)
    headers = {**world.key.headers, "Accept": "text/event-stream"}
    url = f"{two_workers.base_url}/graphql/stream"
    # One connection per key (this server's limit) on each worker: two streams at most, and
    # each a moment after the last one left.
    for _ in range(4):
        deadline = time.monotonic() + 5
        while True:
            with httpx.stream("POST", url, json={"query": BOARD}, headers=headers) as response:
                if response.status_code == 200:
                    first = next(response.iter_lines())
                    break
            assert response.status_code == 429
            assert time.monotonic() < deadline, "the stream's place was not freed"
            time.sleep(0.05)
        assert first == "event: next"


def test_sigterm_tells_websocket_and_stream_clients_to_reconnect_at_once(
    database_url: str, database: Any, tmp_path: Path
) -> None:
    world = build_tenant(database)
    with (
        _serve(
            tmp_path, database_url, 1, shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_SECONDS
        ) as served,
        _websocket(served, world) as socket,
        httpx.stream(
            "POST",
            f"{served.base_url}/graphql/stream",
            json={"query": BOARD},
            headers={**world.key.headers, "Accept": "text/event-stream"},
            timeout=10,
        ) as stream,
    ):
        lines = stream.iter_lines()
        assert next(lines) == "event: next"
        served.process.send_signal(signal.SIGTERM)
        last = [line for line in lines if line.startswith("data: ")][-1]
        try:
            while True:
                socket.recv(timeout=10)
        except Exception as closed:
            close = getattr(closed, "rcvd", None)
        # Not held to the graceful timeout (600 s) by the open stream and WebSocket.
        assert served.process.wait(timeout=SHUTDOWN_WAIT_S) == 0, served.output()
    assert json.loads(last.removeprefix("data: "))["errors"][0]["extensions"]["code"] == (
        "shutdown"
    )
    assert close is not None and close.code == 1012


def test_a_client_resuming_with_its_last_cursor_after_a_restart_misses_nothing_and_gets_nothing_twice(
    database_url: str, database: Any, tmp_path: Path
) -> None:
    world = build_tenant(database)
    scope = Scope.for_tenant(world.tenant.id).in_department(world.department.id)
    written: list[str] = []
    subscribe = {"id": "c", "type": "subscribe", "payload": {"query": CHANGES}}
    with _serve(tmp_path / "first", database_url, 1) as first, _websocket(first, world) as socket:
        socket.send(json.dumps(subscribe))
        socket.send(json.dumps({"id": "b", "type": "subscribe", "payload": {"query": BOARD}}))
        assert _next(socket)["id"] == "b"
        for n in range(5):
            written.append(_post_customer(first, world, f"before the restart {n}"))
        seen = [_next(socket)["payload"]["data"]["changes"] for _ in range(3)]
    # No server runs: these are written while the client is away.
    for n in range(3):
        with database.unit_of_work(scope) as uow:
            created = customers.create(
                uow, validated(CustomerFields, {"last_name": f"while down {n}"})
            )
        written.append(str(created.id))
    after = {**subscribe, "payload": {"query": CHANGES, "variables": {"after": seen[-1]["cursor"]}}}
    with (
        _serve(tmp_path / "second", database_url, 1) as second,
        _websocket(second, world) as socket,
    ):
        socket.send(json.dumps(after))
        resumed = [_next(socket)["payload"]["data"]["changes"] for _ in range(5)]
        written.append(_post_customer(second, world, "after the restart"))
        resumed.append(_next(socket)["payload"]["data"]["changes"])
    assert [change["recordId"] for change in seen + resumed] == written


def _post_customer(served: ServeProcess, world: TenantWorld, name: str) -> str:
    response = httpx.post(
        f"{served.base_url}{API}/customers", json={"last_name": name}, headers=world.key.headers
    )
    assert response.status_code == 201, response.text
    created: str = response.json()["id"]
    return created
