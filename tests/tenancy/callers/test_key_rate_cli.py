"""A key's own rate limit, set on the CLI, is in force on a running app at once: the app caches
the key, and the CLI's change reaches it through NOTIFY (with the Redis limiter, real Redis)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
import structlog
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from dealbase.config import Settings
from dealbase.ops.cli import cli
from tests.redis_support import shared_redis_url
from tests.rest_api.rate_limit_support import (
    CUSTOMERS,
    Policy,
    assert_rate_limited,
    policies,
    serving,
    state,
)
from tests.support import TenantWorld

IN_FORCE_WITHIN_S = 1.0  # as for revocations: every process sees a key change within 1 s


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def app_client(settings: Settings, redis_url: str) -> Iterator[TestClient]:
    """Generous defaults (1000/s, burst 50), so a key's own rate is what limits it."""
    with serving(
        settings, redis_url=redis_url, rate_limit_key="1000/s", rate_limit_key_burst=50
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


def _until_policy(client: TestClient, headers: Mapping[str, str], quota: int) -> httpx.Response:
    """Requests until one answers under a key policy of ``quota``; fails after 1 s."""
    deadline = time.monotonic() + IN_FORCE_WITHIN_S
    while True:
        response = _create(client, headers)
        if policies(response)["key"].quota == quota:
            return response
        assert time.monotonic() < deadline, f"still {policies(response)} after the CLI returned"
        time.sleep(0.01)


def test_key_issued_with_its_own_rate_is_limited_by_it(
    settings: Settings, world: TenantWorld, app_client: TestClient
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
        "0.25/s",
        "--burst",
        "3",
    )
    headers = {"X-Api-Key": issued["api_key"], "X-Department-Id": str(world.department.id)}

    # A token every 4 s: the five requests come well within that, even on a busy machine.
    responses = [_create(app_client, headers) for _ in range(5)]

    assert [r.status_code for r in responses] == [201, 201, 201, 429, 429]
    assert all(policies(r)["key"] == Policy(3, 12) for r in responses)
    assert [state(r).remaining for r in responses] == [2, 1, 0, 0, 0]
    assert assert_rate_limited(responses[3]) == 4


def test_key_update_lowers_a_cached_keys_rate_at_once(
    settings: Settings, world: TenantWorld, app_client: TestClient
) -> None:
    headers = world.key.headers
    assert policies(_create(app_client, headers))["key"] == Policy(50, 1)  # cached now

    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "0.25/s", "--burst", "3")
    first = _until_policy(app_client, headers, 3)
    left = state(first).remaining
    # A token every 4 s, so none comes back while these run, even on a busy machine.
    rest = [_create(app_client, headers) for _ in range(left + 2)]

    assert first.status_code == 201
    assert policies(first)["key"] == Policy(3, 12)
    assert left <= 2
    assert [r.status_code for r in rest] == [201] * left + [429, 429]


def test_key_update_default_rate_puts_the_default_back_at_once(
    settings: Settings, world: TenantWorld, app_client: TestClient
) -> None:
    headers = world.key.headers
    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "0.5/s", "--burst", "2")
    _until_policy(app_client, headers, 2)

    dealbase(settings, "key", "update", str(world.key.key_id), "--default-rate")
    back = _until_policy(app_client, headers, 50)

    assert policies(back) == {"key": Policy(50, 1), "tenant": policies(back)["tenant"]}


def test_raising_an_exhausted_keys_rate_admits_it_at_once(
    settings: Settings, world: TenantWorld, app_client: TestClient
) -> None:
    """A key throttled at 1/s (burst 2), raised to 1000/s (burst 50): its two requests of the
    last moment leave 48 of the new burst, so the next request passes as soon as the new rate is
    in force -- not only once the debt run up at the old rate (2 s) has drained."""
    headers = world.key.headers
    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "1/s", "--burst", "2")
    _until_policy(app_client, headers, 2)
    while _create(app_client, headers).status_code != 429:
        pass

    dealbase(settings, "key", "update", str(world.key.key_id), "--rate", "1000/s", "--burst", "50")
    raised = _until_policy(app_client, headers, 50)

    assert raised.status_code == 201, (raised.headers.get("RateLimit"), raised.text)
