"""Rate limits over HTTP, with the Redis limiter (a real Redis) and the in-process one: exact
admission counts for concurrent requests, 429 problems with Retry-After, RateLimit headers on
every authenticated response (REST and GraphQL), and one budget for two apps on one Redis."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from dealbase.config import Settings
from tests.rest_api.rate_limit_support import (
    CUSTOMERS,
    PROBLEM,
    Limiter,
    Policy,
    State,
    all_at_once,
    assert_rate_limited,
    faults,
    policies,
    serving,
    state,
)
from tests.support import Credentials, TenantWorld

GRAPHQL_QUERY = {"query": "{ customers(first: 1) { edges { node { id } } } }"}


def _send(client: TestClient, key: Credentials) -> httpx.Response:
    response: httpx.Response = client.post(
        CUSTOMERS, json={"last_name": "Burst"}, headers=key.headers
    )
    return response


def _create(client: TestClient, world: TenantWorld) -> httpx.Response:
    return _send(client, world.key)


def test_concurrent_burst_admits_exactly_the_burst(
    settings: Settings, world: TenantWorld, limiter: Limiter
) -> None:
    with serving(
        settings,
        **limiter.app_options,
        rate_limit_key="0.2/s",
        rate_limit_key_burst=10,
    ) as client:
        responses = all_at_once([lambda: _create(client, world)] * 40)
        assert faults(client) == 0

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [201] * 10 + [429] * 30
    for response in responses:
        if response.status_code == 429:
            # 0.2/s: one request every 5 s, so the next one passes in at most 5 s.
            assert 1 <= assert_rate_limited(response) <= 5


def test_tenant_limit_caps_concurrent_requests_of_two_keys(
    settings: Settings, make_tenant: Callable[..., TenantWorld], limiter: Limiter
) -> None:
    world = make_tenant(departments=2)
    with serving(
        settings,
        **limiter.app_options,
        rate_limit_key="0.2/s",
        rate_limit_key_burst=10,
        rate_limit_tenant="0.2/s",
        rate_limit_tenant_burst=15,
    ) as client:
        responses = all_at_once([partial(_send, client, key) for key in world.keys * 20])
        assert faults(client) == 0

    assert sorted(r.status_code for r in responses) == [201] * 15 + [429] * 25
    by_key = {
        key.key_id: sum(
            1
            for r, sent in zip(responses, world.keys * 20, strict=True)
            if sent == key and r.status_code == 201
        )
        for key in world.keys
    }
    assert all(admitted <= 10 for admitted in by_key.values()), by_key


def _until_refused(client: TestClient, world: TenantWorld) -> list[httpx.Response]:
    """Requests until one is refused (fails after 20)."""
    sent = [_create(client, world)]
    while sent[-1].status_code != 429:
        assert len(sent) < 20, [r.status_code for r in sent]
        sent.append(_create(client, world))
    return sent


def test_429_is_a_problem_with_retry_after_after_which_the_request_passes(
    settings: Settings, world: TenantWorld, limiter: Limiter
) -> None:
    with serving(
        settings,
        **limiter.app_options,
        rate_limit_key="1/s",
        rate_limit_key_burst=2,
    ) as client:
        started = limiter.clock()
        *admitted, refused = _until_refused(client, world)
        # A unit back for each second the requests took on Redis's clock; none on the test's.
        back = math.floor(limiter.clock() - started)
        retry_after = assert_rate_limited(refused)
        body = refused.json()

        assert [r.status_code for r in admitted] == [201] * len(admitted)
        assert 2 <= len(admitted) <= 2 + back
        assert retry_after == 1
        assert body["type"] == "/problems/rate_limited"
        assert body["request_id"] == refused.headers["X-Request-Id"]
        assert state(refused) == State("key", 0, 2)
        limiter.wait(retry_after)
        assert _create(client, world).status_code == 201
        *admitted_after, _ = _until_refused(client, world)
        # Never more than the burst and a unit a second since the first request: on the test's
        # clock (the wait's second), none after the one the wait gave back.
        most = 2 + math.floor(limiter.clock() - started)
        assert len(admitted) + 1 + len(admitted_after) <= most, (admitted, admitted_after)


def test_every_authenticated_response_carries_the_headers_and_r_counts_down(
    settings: Settings, world: TenantWorld, limiter: Limiter
) -> None:
    headers = world.key.headers
    took = []  # after each response, the seconds since the first request, on the app's clock
    with serving(
        settings,
        **limiter.app_options,
        rate_limit_key="0.5/s",  # one request every 2 s
        rate_limit_key_burst=8,
        rate_limit_tenant="0.5/s",
        rate_limit_tenant_burst=100,
    ) as client:
        requests: list[Callable[[], httpx.Response]] = [
            lambda: _create(client, world),
            lambda: client.get(f"{CUSTOMERS}/{uuid.uuid4()}", headers=headers),
            lambda: client.post(CUSTOMERS, json={}, headers=headers),
            lambda: client.post(
                CUSTOMERS,
                content=b"{",
                headers={**headers, "Content-Type": "application/json"},
            ),
            lambda: client.post("/graphql", json=GRAPHQL_QUERY, headers=headers),
            lambda: client.get(CUSTOMERS, headers=headers),
            lambda: client.get(f"{CUSTOMERS}/not-an-id", headers=headers),
            lambda: _create(client, world),
            lambda: _create(client, world),
            lambda: client.post("/graphql", json=GRAPHQL_QUERY, headers=headers),
            lambda: client.get(f"{CUSTOMERS}/{uuid.uuid4()}", headers=headers),
        ]
        started = limiter.clock()
        responses = []
        for send in requests:
            responses.append(send())
            took.append(limiter.clock() - started)

    # In the process the app's clock is the test's, which stands still: every figure is exact.
    # Redis's moves on while the requests run: a unit comes back every 2 s they take, and the
    # seconds to full (t) and Retry-After may be one less once they took a second.
    def back(i: int) -> int:
        return math.floor(took[i] / 2)

    def late(i: int) -> int:
        return min(1, math.floor(took[i]))

    statuses = [response.status_code for response in responses]
    assert statuses[:8] == [201, 404, 422, 400, 200, 200, 404, 201], [r.text for r in responses]
    # The last three refused, or (a unit back) answered as when admitted.
    last = list(zip(statuses[8:], (201, 200, 404), strict=True))
    assert all(status in (429, served) for status, served in last), statuses
    assert sum(status == served for status, served in last) <= back(10), (statuses, took)
    for i, response in enumerate(responses):
        assert policies(response) == {"key": Policy(8, 16), "tenant": Policy(100, 200)}
        shown = state(response)
        spent = 8 - shown.remaining
        assert shown.policy == "key"
        assert max(7 - i, 0) <= shown.remaining <= max(7 - i, 0) + back(i), (i, shown, took)
        assert 2 * spent - late(i) <= shown.reset <= 2 * spent, (i, shown, took)
        if response.status_code == 429:
            assert 2 - late(i) <= assert_rate_limited(response) <= 2, (i, took)


def test_graphql_requests_are_admitted_and_refused_like_rest(
    settings: Settings, world: TenantWorld, limiter: Limiter
) -> None:
    headers = world.key.headers
    with serving(
        settings,
        **limiter.app_options,
        rate_limit_key="0.5/s",
        rate_limit_key_burst=3,
    ) as client:
        started = limiter.clock()
        answers = [client.post("/graphql", json=GRAPHQL_QUERY, headers=headers) for _ in range(3)]
        refused_graphql = client.post("/graphql", json=GRAPHQL_QUERY, headers=headers)
        refused_rest = _create(client, world)
        # Retry-After may be a second less once the requests took one on Redis's clock (none
        # on the test's).
        late = min(1, math.floor(limiter.clock() - started))

    assert [a.status_code for a in answers] == [200] * 3
    assert all("errors" not in a.json() for a in answers)
    assert [state(a).remaining for a in answers] == [2, 1, 0]
    assert 2 - late <= assert_rate_limited(refused_graphql) <= 2
    assert refused_graphql.headers["content-type"] == PROBLEM
    assert 2 - late <= assert_rate_limited(refused_rest) <= 2


# Redis's clock: 40 requests all at once, then two more, within the 5 s a token takes.
@pytest.mark.serial
def test_two_apps_on_one_redis_admit_the_combined_budget(
    settings: Settings, world: TenantWorld, redis_url: str
) -> None:
    """Two apps (each its own limiter, its own Redis connections) as two server processes."""
    limits: dict[str, Any] = {
        "redis_url": redis_url,
        "rate_limit_key": "0.2/s",
        "rate_limit_key_burst": 10,
    }
    with (
        serving(settings, **limits) as first,
        serving(settings, **limits) as second,
    ):
        responses = all_at_once(
            [lambda: _create(first, world)] * 20 + [lambda: _create(second, world)] * 20
        )
        assert faults(first) == faults(second) == 0
        later = [_create(client, world) for client in (first, second)]

    assert sorted(r.status_code for r in responses) == [201] * 10 + [429] * 30
    assert [r.status_code for r in later] == [429, 429]
