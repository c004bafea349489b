"""A batch counts by its size over HTTP (``edge.callers.charge_batch``), with the Redis limiter (a
real Redis) and the in-process one: ceil(n / 100) requests, at most a limit's burst, the first
spent on arrival and the rest once the body is read, in the RateLimit headers and 429s; and a
limiter that cannot answer the charge, as one that cannot answer admission.

Most tests use the factory's app with a batch route of the test's own, which reads the body and
then charges the batch as the real batch routes do, with a hook between the two (to stop Redis
there); one sends the real customers batch. The ``[redis]`` cases run in the serial group: their
buckets refill on Redis's clock (a unit in 5 s)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import Depends, Request
from fastapi.testclient import TestClient
from pydantic import BaseModel

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.edge.callers import charge_batch, department_scope
from dealbase.tenancy.rate_limits.admission import VERDICT_STATE
from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Scope
from tests.redis_support import RedisServer, closed_port_url, redis_server
from tests.rest_api.rate_limit_support import (
    API,
    PROBLEM,
    Limiter,
    Policy,
    State,
    assert_rate_limited,
    faults,
    has_rate_limit_headers,
    patient,
    policies,
    slow_limits,
    state,
)
from tests.support import TenantWorld

BATCH = f"{API}/test-batches"


class Batch(BaseModel):
    operations: list[dict[str, Any]]


@contextmanager
def serving_batches(
    settings: Settings,
    *,
    before_charge: Callable[[Request], None] = lambda request: None,
    clock: Callable[[], float] = time.monotonic,
    **update: Any,
) -> Iterator[TestClient]:
    """A started app with these settings changed (a patient Redis timeout unless they say
    otherwise), its in-process limits on ``clock``, and the
    test's batch route, which calls ``before_charge`` with the request between reading its body
    and charging the batch."""
    app = create_app(settings.model_copy(update=patient(update)), clock=clock)

    @app.post(BATCH)
    async def batch(
        request: Request, body: Batch, scope: Annotated[Scope, Depends(department_scope)]
    ) -> dict[str, int]:
        before_charge(request)
        await charge_batch(request, scope, len(body.operations))
        return {"operations": len(body.operations)}

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _send(client: TestClient, world: TenantWorld, operations: int) -> httpx.Response:
    response: httpx.Response = client.post(
        BATCH, json={"operations": [{}] * operations}, headers=world.key.headers
    )
    return response


def test_a_batch_counts_one_request_per_hundred_operations(
    settings: Settings, world: TenantWorld, limiter: Limiter
) -> None:
    with serving_batches(settings, **limiter.app_options, **slow_limits(25, 1000)) as client:
        started = time.monotonic()
        sizes = [1, 100, 101, 1000, 1000]
        admitted = [_send(client, world, operations) for operations in sizes]
        refused = _send(client, world, 250)  # 1 left: the first spent, 2 more refused
        after = _send(client, world, 1)
        # Redis keeps its own clock: the buckets refill meanwhile by what this took (on the
        # test's clock, in the process, nothing).
        elapsed = 0 if limiter.redis_url is None else math.ceil(time.monotonic() - started)

    assert [r.status_code for r in admitted] == [200] * 5, [r.text for r in admitted]
    for response in admitted:
        assert policies(response) == {"key": Policy(25, 125), "tenant": Policy(1000, 5000)}
    # Costs 1, 1, 2, 10 and 10, each counted whole in the headers of its own response.
    found = [state(r) for r in admitted]
    assert [(s.policy, s.remaining) for s in found] == [("key", n) for n in (24, 23, 21, 11, 1)]
    for shown, remaining in zip(found, (24, 23, 21, 11, 1), strict=True):
        assert 5 * (25 - remaining) - elapsed <= shown.reset <= 5 * (25 - remaining), found
    # Sent again, the batch pays all of its 3: they fit in 15 s.
    assert 15 - elapsed <= assert_rate_limited(refused) <= 15
    assert refused.headers["content-type"] == PROBLEM
    refused_state = state(refused)
    assert (refused_state.policy, refused_state.remaining) == ("key", 0)
    assert 125 - elapsed <= refused_state.reset <= 125
    # The refused batch's first request stayed spent: the last one left is gone.
    assert 5 - elapsed <= assert_rate_limited(after) <= 5


def test_the_customers_batch_route_is_charged_by_its_size(
    settings: Settings, world: TenantWorld, limiter: Limiter
) -> None:
    operations = [{"op": "create", "data": {"last_name": f"L{n}"}} for n in range(250)]
    with serving_batches(settings, **limiter.app_options, **slow_limits(25, 1000)) as client:
        response = client.post(
            f"{API}/customers/batch", json={"operations": operations}, headers=world.key.headers
        )

    assert response.status_code == 200, response.text
    assert state(response) == State("key", 22, 15)


@pytest.mark.parametrize(("policy", "burst"), [("key", 1), ("key", 3), ("tenant", 3)])
def test_a_batch_dearer_than_a_burst_costs_the_burst(
    settings: Settings, world: TenantWorld, limiter: Limiter, policy: str, burst: int
) -> None:
    bursts = {"key": 100, "tenant": 100, policy: burst}
    with serving_batches(
        settings, **limiter.app_options, **slow_limits(bursts["key"], bursts["tenant"])
    ) as client:
        started = time.monotonic()
        largest = _send(client, world, 1000)
        next_one = _send(client, world, 1)
        # What Redis's clock refilled between the two (in the process, nothing).
        elapsed = 0 if limiter.redis_url is None else math.ceil(time.monotonic() - started)

    assert largest.status_code == 200, largest.text
    assert state(largest) == State(policy, 0, 5 * burst)
    assert 5 - elapsed <= assert_rate_limited(next_one) <= 5


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_a_charge_the_limiter_cannot_answer_is_served_or_refused_as_admission_would(
    settings: Settings, world: TenantWorld, own_redis: RedisServer, fail: str
) -> None:
    """Redis answers the batch's admission, then stops before its charge: refused connections,
    which need no timeout (the limiter's is a bound for failing here, not the test's subject)."""
    admissions: list[Verdict] = []

    def stop_redis(request: Request) -> None:
        admissions.append(getattr(request.state, VERDICT_STATE))
        own_redis.stop()

    with serving_batches(
        settings,
        before_charge=stop_redis,
        redis_url=own_redis.url,
        rate_limit_fail=fail,
    ) as client:
        response = _send(client, world, 1000)
        counted = faults(client)

    (admission,) = admissions
    assert admission.allowed and admission.buckets, "Redis answered the admission"
    if fail == "open":
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "service_unavailable"
    # No headers of the admission's verdict, which the batch's cost left behind.
    assert not has_rate_limit_headers(response), response.headers
    assert counted == 1


def test_a_batch_served_without_the_limiter_is_not_charged_either(
    settings: Settings, world: TenantWorld
) -> None:
    """Redis is unreachable, failing open: admission counts one fault and serves the batch
    without a verdict; its charge asks the limiter no more (a second fault, a second wait)."""
    with serving_batches(
        settings, redis_url=closed_port_url(), rate_limit_fail="open", redis_timeout_ms=50
    ) as client:
        response = _send(client, world, 1000)
        counted = faults(client)

    assert response.status_code == 200, response.text
    assert not has_rate_limit_headers(response), response.headers
    assert counted == 1
