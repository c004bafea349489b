"""A key's own rate limit, set on the CLI, is in force on a running app at once: the app caches
the key, and the CLI's change reaches it through NOTIFY. With the Redis limiter (a real Redis,
its clock: serial) and the in-process one (on a clock only the test moves: nothing refills).

A test that changes a cached key waits until the app has heard of the change (its cache has
dropped the key) and then sends the request the change is about."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
import structlog
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from dealbase.config import Settings
from dealbase.ops.cli import cli
from dealbase.tenancy.callers.authentication import Authenticator
from tests.redis_support import shared_redis_url
from tests.rest_api.rate_limit_support import (
    CUSTOMERS,
    Limiter,
    Policy,
    assert_rate_limited,
    limiter,
    policies,
    serving,
    state,
)
from tests.support import TenantWorld, wait_until

__all__ = ["limiter"]  # the fixture, for this module's tests


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def app_client(settings: Settings, limiter: Limiter) -> Iterator[TestClient]:
    """Generous defaults (1000/s, burst 50), so a key's own rate is what limits it."""
    with serving(
        settings,
        **limiter.app_options,
        rate_limit_key="1000/s",
        rate_limit_key_burst=50,
    ) as client:
        yield client


def dealbase(settings: Settings, *args: str) -> Any:
    """``dealbase ARGS --json`` in-process, against the app's database; its JSON output."""
    env: Mapping[str, str | None] = {
        "DEALBASE_DATABASE_URL": settings.database_url,
        "DEALBASE_DATA_DIR": str(settings.data_dir),
        "DEALBASE_LOG_LEVEL": "warning",
        "DEALBASE_REDIS_URL": None,
    }
    saved_logging = structlog.get_config()
    try:
        result = CliRunner().invoke(cli, [*args, "--json"], env=dict(env))
    finally:
        structlog.configure(**saved_logging)
    assert result.exit_code == 0, f"dealbase {' '.join(args)}: {result.stdout} {result.stderr}"
    return json.loads(result.stdout)


def _create(client: TestClient, headers: Mapping[str, str]) -> httpx.Response:
    response: httpx.Response = client.post(
        CUSTOMERS, json={"last_name": "Rate"}, headers=dict(headers)
    )
    return response


def _until_heard(client: TestClient, key_id: uuid.UUID) -> None:
    """Returns once the app has heard of the key's change: its cached copy is gone (the notice
    applied, or never cached), so its next request reads the key as the CLI left it. Waiting
    sends nothing: a request before the change is in force would spend from the key's bucket."""
    authenticator: Authenticator = client.app.state.authenticator  # type: ignore[attr-defined]
    wait_until(lambda: authenticator.cache.get(key_id) is None, "the key's drop from the cache")


def _once_heard(
    client: TestClient, key_id: uuid.UUID, headers: Mapping[str, str]
) -> httpx.Response:
    """The first request once the app has heard of the key's change."""
    _until_heard(client, key_id)
    return _create(client, headers)


def test_key_issued_with_its_own_rate_is_limited_by_it(
    settings: Settings, world: TenantWorld, limiter: Limiter, app_client: TestClient
) -> None:
    issued = dealbase(
        settings,
        "key",
        "issue",
        "--tenant",
        str(world.tenant.id),
        "--department",
        str(world.department.id),
        "--rate",
        "2/s",
        "--burst",
        "3",
    )
    headers = {"X-Api-Key": issued["api_key"], "X-Department-Id": str(world.department.id)}

    started = limiter.clock()
    responses = [_create(app_client, headers) for _ in range(5)]
    # A unit comes back every 0.5 s the requests took on Redis's clock; none on the test's.
    back = math.floor((limiter.clock() - started) * 2)

    statuses = [r.status_code for r in responses]
    assert statuses[:3] == [201] * 3, [r.text for r in responses]
    assert set(statuses[3:]) <= {201, 429} and statuses[3:].count(201) <= back, statuses
    assert all(policies(r)["key"] == Policy(3, 2) for r in responses)
    for i, response in enumerate(responses):
        assert max(2 - i, 0) <= state(response).remaining <= max(2 - i, 0) + back, (i, back)
        if response.status_code == 429:
            assert assert_rate_limited(response) == 1


def test_key_update_lowers_a_cached_keys_rate_at_once(
    settings: Settings, world: TenantWorld, limiter: Limiter, app_client: TestClient
) -> None:
    headers = world.key.headers
    assert policies(_create(app_client, headers))["key"] == Policy(50, 1)  # cached now

    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "1/s", "--burst", "3")
    _until_heard(app_client, world.key.key_id)
    started = limiter.clock()
    first = _create(app_client, headers)
    left = state(first).remaining
    rest = [_create(app_client, headers) for _ in range(left + 2)]
    # A unit comes back every second the requests took on Redis's clock; none on the test's.
    back = math.floor(limiter.clock() - started)

    assert first.status_code == 201
    assert policies(first)["key"] == Policy(3, 3)
    assert left <= 2
    statuses = [r.status_code for r in rest]
    assert statuses[:left] == [201] * left, statuses
    assert set(statuses[left:]) <= {201, 429} and statuses[left:].count(201) <= back, statuses


def test_key_update_default_rate_puts_the_default_back_at_once(
    settings: Settings, world: TenantWorld, app_client: TestClient
) -> None:
    headers = world.key.headers
    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "0.5/s", "--burst", "2")
    lowered = _once_heard(app_client, world.key.key_id, headers)

    dealbase(settings, "key", "update", str(world.key.key_id), "--default-rate")
    back = _once_heard(app_client, world.key.key_id, headers)

    assert policies(lowered)["key"] == Policy(2, 4)
    assert policies(back) == {"key": Policy(50, 1), "tenant": policies(back)["tenant"]}


def test_raising_an_exhausted_keys_rate_admits_it_at_once(
    settings: Settings, world: TenantWorld, app_client: TestClient
) -> None:
    """A key throttled at 1/s (burst 2), raised to 1000/s (burst 50): its two requests of the
    last moment leave 48 of the new burst, so the next request passes as soon as the new rate is
    in force -- not only once the debt run up at the old rate (2 s) has drained."""
    headers = world.key.headers
    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "1/s", "--burst", "2")
    throttled = [_once_heard(app_client, world.key.key_id, headers)]
    while throttled[-1].status_code != 429:
        throttled.append(_create(app_client, headers))

    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "1000/s", "--burst", "50")
    raised = _once_heard(app_client, world.key.key_id, headers)

    assert policies(throttled[0])["key"] == Policy(2, 2)
    assert raised.status_code == 201, (raised.headers.get("RateLimit"), raised.text)
    assert policies(raised)["key"] == Policy(50, 1)
