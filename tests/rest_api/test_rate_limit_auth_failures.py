"""Failed authentications per client address, over HTTP with the Redis limiter (a real Redis) and
the in-process one: past its allowance an address is refused 429 with Retry-After before any key
lookup (the key cache's miss counter stands still), with a good key too, on REST and GraphQL;
other addresses are served through its flood; good keys spend nothing; the address may fail
again after Retry-After; IPv6 addresses count by /64; X-Forwarded-For counts only from a trusted
proxy; health and metrics answer regardless.

The apps run behind uvicorn's own proxy-header handling (what ``dealbase serve`` runs) trusting
the test client as their proxy, so X-Forwarded-For gives each request its client address.
"""

from __future__ import annotations

import ipaddress
import math
import secrets
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from dealbase.app import create_app
from dealbase.config import Settings
from tests.rest_api.rate_limit_support import (
    CUSTOMERS,
    PROBLEM,
    Limiter,
    all_at_once,
    assert_rate_limited,
    counted,
    patient,
)
from tests.support import FakeClock, TenantWorld

# Three failures, then one more every 2 s: nothing refills while a test runs, unless it waits.
SLOW_REFILL: dict[str, Any] = {
    "rate_limit_auth_failures": "0.5/s",
    "rate_limit_auth_failures_burst": 3,
}
GRAPHQL_QUERY = {"query": "{ customers(first: 1) { edges { node { id } } } }"}
LOOKUPS = "dealbase_key_cache_lookups_total"
REFUSALS = "dealbase_auth_failure_refusals_total"


@contextmanager
def behind_proxy(
    settings: Settings,
    *,
    trusted: str = "testclient",
    clock: Callable[[], float] | None = None,
    **update: Any,
) -> Iterator[TestClient]:
    """A started app with these settings changed (a patient Redis timeout unless they say
    otherwise), behind uvicorn's proxy-header handling that
    trusts ``trusted`` (by default the test client) to forward its clients' addresses. Its
    in-process limits are on ``clock``, by default one of the test's that nothing moves."""
    app = create_app(settings.model_copy(update=patient(update)), clock=clock or FakeClock())
    with TestClient(
        ProxyHeadersMiddleware(app, trusted_hosts=trusted),  # type: ignore[arg-type]
        raise_server_exceptions=False,
    ) as client:
        yield client


def _address() -> str:
    """An address of 10/8 no other test uses: the buckets in the shared Redis outlive an app."""
    return str(ipaddress.IPv4Address((10 << 24) + secrets.randbelow(1 << 24)))


@pytest.fixture
def guesser() -> str:
    return _address()


def _guess(world: TenantWorld) -> dict[str, str]:
    """Well-formed credentials of a key that does not exist: each costs a lookup if it gets one."""
    return {
        "X-Api-Key": f"dbk_{uuid.uuid4().hex}_{'A' * 43}",
        "X-Department-Id": str(world.department.id),
    }


def _create(client: TestClient, credentials: dict[str, str], address: str) -> httpx.Response:
    response: httpx.Response = client.post(
        CUSTOMERS,
        json={"last_name": "Guess"},
        headers={**credentials, "X-Forwarded-For": address},
    )
    return response


def _query(client: TestClient, credentials: dict[str, str], address: str) -> httpx.Response:
    response: httpx.Response = client.post(
        "/graphql", json=GRAPHQL_QUERY, headers={**credentials, "X-Forwarded-For": address}
    )
    return response


def test_past_its_allowance_an_address_is_refused_before_any_key_lookup(
    settings: Settings, world: TenantWorld, limiter: Limiter, guesser: str
) -> None:
    with behind_proxy(settings, **limiter.app_options, **SLOW_REFILL) as client:
        failed = [
            _create(client, _guess(world), guesser),
            _query(client, _guess(world), guesser),
            _create(client, {"X-Api-Key": "not a key"}, guesser),
        ]
        lookups = counted(client, LOOKUPS, result="miss")
        refused = [
            _create(client, _guess(world), guesser),
            _query(client, _guess(world), guesser),
            _create(client, {}, guesser),
            # A good key is refused as well: from this address it would be one more guess.
            _create(client, world.key.headers, guesser),
            _query(client, world.key.headers, guesser),
        ]
        lookups_after = counted(client, LOOKUPS, result="miss")
        refusals = counted(client, REFUSALS)

    assert [r.status_code for r in failed] == [401] * 3, [r.text for r in failed]
    assert lookups == 2  # the malformed key needed none
    for response in refused:
        # One failure every 2 s: the next one fits within 2 s.
        assert 1 <= assert_rate_limited(response) <= 2
        assert response.headers["content-type"] == PROBLEM
        assert "failed authentications" in response.json()["detail"]
    assert lookups_after == lookups
    assert refusals == len(refused)


def test_a_flood_of_bad_keys_from_one_address_leaves_other_addresses_served(
    settings: Settings, world: TenantWorld, limiter: Limiter, guesser: str
) -> None:
    neighbour = _address()
    with behind_proxy(settings, **limiter.app_options, **SLOW_REFILL) as client:
        started = limiter.clock()
        flood = all_at_once([lambda: _create(client, _guess(world), guesser)] * 30)
        served = all_at_once(
            [lambda: _create(client, world.key.headers, neighbour)] * 5
            + [lambda: _query(client, world.key.headers, neighbour)] * 5
        )
        after_flood = _create(client, world.key.headers, guesser)
        # On the test's clock in the process, nothing; on Redis's, what the requests took.
        took = limiter.clock() - started

    statuses = [r.status_code for r in flood]
    assert set(statuses) <= {401, 429}, statuses
    assert statuses.count(401) >= 3, statuses
    assert sorted(r.status_code for r in served) == [200] * 5 + [201] * 5
    assert all("errors" not in r.json() for r in served if r.status_code == 200)
    # Failures of requests already past the allowance when it ran out are owed: the address
    # waits until they are paid back, 2 s each, beyond the burst's 3, less what Redis's clock
    # paid back while the requests ran.
    assert assert_rate_limited(after_flood) >= 2 * (statuses.count(401) - 3) - math.floor(took)


def test_good_keys_never_spend_the_allowance(
    settings: Settings, world: TenantWorld, limiter: Limiter, guesser: str
) -> None:
    with behind_proxy(settings, **limiter.app_options, **SLOW_REFILL) as client:
        served = [_create(client, world.key.headers, guesser) for _ in range(15)]
        served += [_query(client, world.key.headers, guesser) for _ in range(5)]
        guesses = [_create(client, _guess(world), guesser) for _ in range(4)]

    assert [r.status_code for r in served] == [201] * 15 + [200] * 5
    assert [r.status_code for r in guesses] == [401, 401, 401, 429]


def test_an_address_is_served_again_after_its_retry_after(
    settings: Settings, world: TenantWorld, limiter: Limiter, guesser: str
) -> None:
    fast: dict[str, Any] = {"rate_limit_auth_failures": "2/s", "rate_limit_auth_failures_burst": 2}
    with behind_proxy(settings, **limiter.app_options, **fast) as client:
        guesses = [_create(client, _guess(world), guesser) for _ in range(2)]
        refused = _create(client, world.key.headers, guesser)
        retry_after = assert_rate_limited(refused)
        limiter.wait(retry_after)
        served = _create(client, world.key.headers, guesser)
        failed_again = _create(client, _guess(world), guesser)

    assert [r.status_code for r in guesses] == [401, 401]
    assert retry_after == 1
    assert served.status_code == 201, served.text
    assert failed_again.status_code == 401


def test_ipv6_addresses_count_by_their_64(settings: Settings, world: TenantWorld) -> None:
    burst_of_two: dict[str, Any] = {
        "rate_limit_auth_failures": "0.5/s",
        "rate_limit_auth_failures_burst": 2,
    }
    with behind_proxy(settings, **burst_of_two) as client:
        failed = [
            _create(client, _guess(world), "2001:db8:1:2::1"),
            _create(client, _guess(world), "2001:db8:1:2:ffff:ffff:ffff:7"),
        ]
        same_64 = _create(client, world.key.headers, "2001:db8:1:2::99")
        next_64 = _create(client, world.key.headers, "2001:db8:1:3::1")
        ipv4 = [_create(client, _guess(world), "192.0.2.9") for _ in range(2)]
        ipv4_mapped = _create(client, world.key.headers, "::ffff:192.0.2.9")

    assert [r.status_code for r in failed] == [401, 401]
    assert_rate_limited(same_64)
    assert next_64.status_code == 201, next_64.text
    assert [r.status_code for r in ipv4] == [401, 401]
    assert_rate_limited(ipv4_mapped)


def test_x_forwarded_for_from_an_untrusted_peer_changes_nothing(
    settings: Settings, world: TenantWorld
) -> None:
    # uvicorn's default trust, the loopback: the test client is not a trusted proxy.
    with behind_proxy(settings, trusted="127.0.0.1,::1", **SLOW_REFILL) as client:
        rotating = [_create(client, _guess(world), f"192.0.2.{n}") for n in range(1, 6)]

    assert [r.status_code for r in rotating] == [401, 401, 401, 429, 429]


def test_health_and_metrics_answer_an_address_past_its_allowance(
    settings: Settings, world: TenantWorld, guesser: str
) -> None:
    with behind_proxy(settings, **SLOW_REFILL) as client:
        for _ in range(3):
            _create(client, _guess(world), guesser)
        assert_rate_limited(_create(client, world.key.headers, guesser))

        answers = [
            client.get(path, headers={"X-Forwarded-For": guesser})
            for path in ("/healthz", "/readyz", "/metrics")
        ]

    assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
