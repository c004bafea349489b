"""Subscriptions over Server-Sent Events at /graphql/stream (graphql-sse, distinct connections
mode): the key in the request's headers, each result a `next` event whose id is the change's
cursor, resumed without a gap; keep-alive comments; a stream ended by an error, a revoked key
or the server stopping, and the same per-key limit of connections as WebSockets; each stream
opened spends the key's rate, as a request does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from fastapi import FastAPI
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.graphql_api.live import stream as live_stream
from dealbase.graphql_api.live.service import LiveService
from dealbase.ops import admin
from tests.graphql_api.live_support import (
    API,
    BOARD,
    CHANGES,
    SSE,
    STREAM,
    Stream,
    create_customer,
    stream,
)
from tests.rest_api.rate_limit_support import assert_rate_limited
from tests.support import FakeClock, TenantWorld


@pytest.fixture(scope="module")
def tight(settings: Settings) -> Iterator[TestClient]:
    app = create_app(
        settings.model_copy(update={"live_connections_per_key": 2, "live_keepalive_seconds": 0.2})
    )
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _app(client: TestClient) -> FastAPI:
    app: FastAPI = client.app  # type: ignore[assignment]
    return app


def _start_of_feed(client: TestClient, headers: dict[str, str]) -> str:
    """The events feed's cursor before its first event."""
    response = client.get(f"{API}/events", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["data"] == []
    cursor: str = response.json()["next_cursor"]
    return cursor


def test_changes_stream_as_next_events_whose_id_is_the_cursor_from_where_the_client_resumes(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    start = _start_of_feed(client, headers)
    first = create_customer(client, headers, "before the stream")
    with stream(client, headers, CHANGES, {"after": start}) as events:
        caught_up = events.next_event()
        second = create_customer(client, headers, "while it streams")
        live = events.next_event()
    assert caught_up.event == live.event == "next"
    assert caught_up.data["data"]["changes"]["recordId"] == first["id"]
    assert live.data["data"]["changes"]["recordId"] == second["id"]
    assert caught_up.id == caught_up.data["data"]["changes"]["cursor"]
    third = create_customer(client, headers, "after it")
    with stream(client, headers, CHANGES, {"after": live.id}) as events:
        resumed = events.next_event()
    assert resumed.data["data"]["changes"]["recordId"] == third["id"]


def test_the_board_streams_now_and_after_each_change_of_a_deal(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    with stream(client, headers, BOARD) as events:
        now = events.next_event().data["data"]["pipelineBoard"]
        deal = client.post(
            f"{API}/deals", json={"name": "Engine", "volume": 42, "customers": []}, headers=headers
        )
        assert deal.status_code == 201, deal.text
        after = events.next_event().data["data"]["pipelineBoard"]
    assert now["steps"][0]["dealCount"] == 0
    assert (after["steps"][0]["dealCount"], after["steps"][0]["totalVolume"]) == (1, 42)


def test_a_get_with_the_operation_in_its_query_string_streams_too(
    client: TestClient, world: TenantWorld
) -> None:
    with client.stream(
        "GET", STREAM, params={"query": BOARD}, headers={**SSE, **world.key.headers}
    ) as response:
        assert response.status_code == 200
        board = Stream(response).next_event()
    assert board.data["data"]["pipelineBoard"]["departmentId"] == str(world.department.id)


def test_metrics_count_open_streams_and_the_results_they_sent(
    tight: TestClient, world: TenantWorld
) -> None:
    def sample(name: str) -> float:
        for line in tight.get("/metrics").text.splitlines():
            if line.startswith(f'{name}{{transport="sse"}}'):
                return float(line.split()[-1])
        return 0.0

    sent_before = sample("dealbase_live_messages_sent_total")
    with stream(tight, world.key.headers, BOARD) as events:
        events.next_event()
        open_while = sample("dealbase_live_connections")
        sent_after = sample("dealbase_live_messages_sent_total")
    assert open_while >= 1
    assert sent_after == sent_before + 1


def test_a_stream_without_a_valid_key_is_refused_as_a_problem(client: TestClient) -> None:
    response = client.post(STREAM, json={"query": BOARD}, headers={**SSE, "X-Api-Key": "dbk_wrong"})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "unauthenticated"


def test_an_unreadable_body_is_refused_before_any_stream(
    client: TestClient, world: TenantWorld
) -> None:
    response = client.post(
        STREAM,
        content=b"{",
        headers={**SSE, **world.key.headers, "Content-Type": "application/json"},
    )
    assert (response.status_code, response.json()["code"]) == (400, "malformed_json")


def test_an_operation_error_is_a_next_event_with_the_errors_then_complete(
    client: TestClient, world: TenantWorld
) -> None:
    with stream(client, world.key.headers, CHANGES, {"after": "not-a-cursor"}) as events:
        failed = events.next_event()
        completed = events.next_event()
        ended = events.ended()
    assert failed.event == "next"
    assert failed.data["errors"][0]["extensions"]["code"] == "validation_failed"
    assert (completed.event, completed.data, ended) == ("complete", None, True)


def test_an_idle_stream_carries_keep_alive_comments(tight: TestClient, world: TenantWorld) -> None:
    with stream(tight, world.key.headers, BOARD) as events:
        events.next_event()
        # The board changes no more: only comments come, every 0.2 s.
        lines = events._lines
        comments = [next(lines) for _ in range(4)]
    assert comments == [": keep-alive", "", ": keep-alive", ""]


def test_revoking_the_key_ends_its_stream_with_a_last_error_and_complete(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    with stream(client, world.key.headers, BOARD) as events:
        events.next_event()
        admin.revoke_key(database, world.key.key_id)
        last = events.next_event()
        completed = events.next_event()
    assert last.data["errors"][0]["extensions"]["code"] == "revoked"
    assert completed.event == "complete"


def test_stopping_the_server_ends_each_stream_without_complete_so_the_client_reconnects(
    settings: Settings, world: TenantWorld
) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as stopping:
        live: LiveService = _app(stopping).state.live
        portal: BlockingPortal | None = stopping.portal
        assert portal is not None
        with stream(stopping, world.key.headers, BOARD) as events:
            events.next_event()
            portal.call(live.shut_down)
            last = events.next_event()
            ended = events.ended()
    assert last.data["errors"][0]["extensions"]["code"] == "shutdown"
    assert "reconnect" in last.data["errors"][0]["message"]
    assert ended


def test_streams_count_against_the_keys_limit_of_connections(
    tight: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    with stream(tight, headers, BOARD), stream(tight, headers, BOARD):
        refused = tight.post(STREAM, json={"query": BOARD}, headers={**SSE, **headers})
    assert refused.status_code == 429
    assert refused.json()["code"] == "too_many_connections"


def test_opening_streams_past_the_keys_burst_is_refused_429_rate_limited_as_requests_are(
    settings: Settings, world: TenantWorld
) -> None:
    """Burst 2 on a clock that stands still: each stream spends one of the key's rate, the third
    is refused as a REST request would be, and so is the key's next REST request."""
    limited = settings.model_copy(update={"rate_limit_key": "1/s", "rate_limit_key_burst": 2})
    app = create_app(limited, clock=FakeClock())
    with TestClient(app, raise_server_exceptions=False) as client:
        headers = world.key.headers
        for _ in range(2):
            with stream(client, headers, BOARD) as events:
                assert events.next_event().event == "next"
        # Streamed: were it admitted, its events would never end.
        with client.stream(
            "POST", STREAM, json={"query": BOARD}, headers={**SSE, **headers}
        ) as refused:
            assert refused.status_code == 429, refused.headers
            refused.read()
        rest = client.get(f"{API}/customers", headers=headers)

    assert assert_rate_limited(refused) == 1
    assert assert_rate_limited(rest) == 1


def test_a_stream_whose_operation_ignores_its_cancellation_still_ends_when_its_client_leaves(
    settings: Settings, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operation of a stream whose client went away is cancelled, and the response waits for
    it to end, but not for ever: one that holds on past its cancellation (as one did under load)
    is logged and the response ends all the same."""
    monkeypatch.setattr(live_stream, "_OPERATION_END_SECONDS", 0.2)

    def read_one_event_and_leave() -> None:
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            schema = _app(client).state.live.schema
            subscribe = schema.subscribe

            async def stubborn(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                results = await subscribe(*args, **kwargs)

                async def first_then_holding_on() -> AsyncIterator[Any]:
                    async for result in results:
                        yield result
                        break
                    try:
                        await asyncio.Event().wait()
                    except asyncio.CancelledError:
                        await asyncio.Event().wait()  # cancelled once more, it ends

                return first_then_holding_on()

            monkeypatch.setattr(schema, "subscribe", stubborn)
            with stream(client, world.key.headers, BOARD) as events:
                events.next_event()

    # In a daemon thread, app and client: were the response to wait for ever, the test fails
    # rather than hangs.
    reader = threading.Thread(target=read_one_event_and_leave, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "the stream did not end once its client left"
