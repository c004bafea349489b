"""GCRA arithmetic of both limiters, the Redis one against a real Redis.

Each test runs against the in-process limiter on a clock the test moves (exact times), and
against RedisLimiter on Redis's own clock (times within a few milliseconds).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis

from dealbase.tenancy.rate_limits import (
    Bucket,
    InProcessLimiter,
    RateLimiter,
    RedisLimiter,
    Verdict,
)
from dealbase.tenancy.scope import Rate
from tests.redis_support import shared_redis_url

GENEROUS = Rate(per_second=1000, burst=1000)
# Redis's clock moves on between calls: a wait it reports may be this much short of the interval.
SLACK_S = 0.03


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


class FakeClock:
    """A monotonic clock in seconds that only the test moves (far from zero, like a real one)."""

    def __init__(self, start: float = 987_654.321) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    limiter: RateLimiter
    loop: asyncio.Runner  # limiters are asked on an event loop, as the server asks them
    wait: Callable[[float], None]
    exact: bool  # the in-process limiter on the fake clock
    prefix: str | None = None  # RedisLimiter's key prefix
    url: str | None = None  # and its Redis

    def check(
        self, key_id: uuid.UUID, key_rate: Rate, tenant_id: uuid.UUID, tenant_rate: Rate
    ) -> Verdict:
        return self.loop.run(self.limiter.check(key_id, key_rate, tenant_id, tenant_rate))

    def assert_near(self, seconds: float, expected: float) -> None:
        """``seconds`` is ``expected``, exactly on the fake clock, else at most SLACK_S short."""
        if self.exact:
            assert seconds == pytest.approx(expected, abs=1e-9)
        else:
            assert expected - SLACK_S <= seconds <= expected + 1e-6, (seconds, expected)


@pytest.fixture(params=["in-process", "redis"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with asyncio.Runner() as loop:
        if request.param == "in-process":
            clock = FakeClock()
            yield Harness(InProcessLimiter(clock), loop, clock.advance, exact=True)
            return
        url: str = request.getfixturevalue("redis_url")
        prefix = f"dealbase:test:{uuid.uuid4().hex}"
        limiter = RedisLimiter(url, timeout_seconds=1.0, prefix=prefix)
        try:
            yield Harness(limiter, loop, time.sleep, exact=False, prefix=prefix, url=url)
        finally:
            loop.run(limiter.close())


def _bucket(verdict: Verdict, policy: str) -> Bucket:
    (bucket,) = [b for b in verdict.buckets if b.policy == policy]
    return bucket


def test_fresh_bucket_admits_exactly_burst_then_refuses_for_one_interval(harness: Harness) -> None:
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(per_second=10, burst=5)  # one request every 100 ms
    # Room for every call, and no refill while the test runs, so its count is exact.
    roomy = Rate(per_second=0.001, burst=1000)

    admitted = [harness.check(key, rate, tenant, roomy) for _ in range(5)]
    refused = harness.check(key, rate, tenant, roomy)

    assert [v.allowed for v in admitted] == [True] * 5
    assert [_bucket(v, "key").remaining for v in admitted] == [4, 3, 2, 1, 0]
    assert [_bucket(v, "tenant").remaining for v in admitted] == [999, 998, 997, 996, 995]
    assert not refused.allowed
    assert [b.policy for b in refused.buckets] == ["key", "tenant"]
    harness.assert_near(_bucket(refused, "key").retry_after_seconds, 0.1)
    harness.assert_near(_bucket(refused, "key").reset_seconds, 0.5)
    assert _bucket(refused, "key").remaining == 0
    assert _bucket(refused, "tenant").retry_after_seconds == 0
    assert refused.retry_after_seconds == 1

    harness.wait(_bucket(refused, "key").retry_after_seconds)
    again = harness.check(key, rate, tenant, roomy)
    after = harness.check(key, rate, tenant, roomy)

    assert again.allowed, again
    assert _bucket(again, "key").remaining == 0
    assert not after.allowed
    harness.assert_near(_bucket(after, "key").retry_after_seconds, 0.1)


def test_bucket_refills_at_the_rate_and_never_beyond_the_burst(harness: Harness) -> None:
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(per_second=10, burst=5)
    assert all(harness.check(key, rate, tenant, GENEROUS).allowed for _ in range(5))

    harness.wait(0.33)  # three intervals and a bit
    refilled = [harness.check(key, rate, tenant, GENEROUS).allowed for _ in range(5)]

    assert refilled == [True, True, True, False, False]

    harness.wait(0.8)  # idle longer than the window: a full bucket, no more
    rested = [harness.check(key, rate, tenant, GENEROUS) for _ in range(6)]

    assert [v.allowed for v in rested] == [True] * 5 + [False]
    assert _bucket(rested[0], "key").remaining == 4


def test_refusal_by_the_key_spends_nothing_from_the_tenant(harness: Harness) -> None:
    tenant, limited, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(1, 2), Rate(1, 10)
    assert all(harness.check(limited, key_rate, tenant, tenant_rate).allowed for _ in range(2))

    refusals = [harness.check(limited, key_rate, tenant, tenant_rate) for _ in range(5)]
    first_of_other = harness.check(other, Rate(1, 10), tenant, tenant_rate)

    assert not any(v.allowed for v in refusals)
    for verdict in refusals:
        harness.assert_near(_bucket(verdict, "key").retry_after_seconds, 1.0)
        assert _bucket(verdict, "tenant").retry_after_seconds == 0
    assert first_of_other.allowed
    # 10 - 2 spent by the limited key - 1 for this request: the refusals spent nothing.
    assert _bucket(first_of_other, "tenant").remaining == 7


def test_refusal_by_the_tenant_spends_nothing_from_the_key(harness: Harness) -> None:
    tenant, busy, refused_key = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(1, 5), Rate(20, 3)  # the tenant refills every 50 ms
    assert all(harness.check(busy, key_rate, tenant, tenant_rate).allowed for _ in range(3))

    refusals = [harness.check(refused_key, key_rate, tenant, tenant_rate) for _ in range(5)]
    if harness.url is not None:
        client = redis.Redis.from_url(harness.url)
        try:
            assert client.exists(f"{harness.prefix}:key:{refused_key}") == 0
        finally:
            client.close()
    harness.wait(0.2)  # the tenant's bucket is full again; the key's never moved
    first = harness.check(refused_key, key_rate, tenant, tenant_rate)

    assert not any(v.allowed for v in refusals)
    for verdict in refusals:
        assert _bucket(verdict, "key").retry_after_seconds == 0
        assert _bucket(verdict, "tenant").retry_after_seconds > 0
    assert first.allowed
    assert _bucket(first, "key").remaining == 4


def test_tenant_limit_caps_the_sum_over_two_keys(harness: Harness) -> None:
    tenant, first, second = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(1, 4), Rate(1, 5)

    verdicts = [harness.check(key, key_rate, tenant, tenant_rate) for key in [first, second] * 5]

    assert [v.allowed for v in verdicts] == [True] * 5 + [False] * 5
    for verdict in verdicts[5:]:
        harness.assert_near(_bucket(verdict, "tenant").retry_after_seconds, 1.0)
        assert _bucket(verdict, "key").retry_after_seconds == 0
        assert verdict.retry_after_seconds == 1


@pytest.mark.parametrize(
    ("rate", "expected"), [(Rate(0.4, 1), 3), (Rate(1, 1), 1), (Rate(20, 1), 1), (Rate(0.25, 2), 4)]
)
def test_retry_after_is_whole_seconds_and_at_least_one(
    harness: Harness, rate: Rate, expected: int
) -> None:
    key, tenant = uuid.uuid4(), uuid.uuid4()
    for _ in range(rate.burst):
        assert harness.check(key, rate, tenant, GENEROUS).allowed

    refused = harness.check(key, rate, tenant, GENEROUS)

    assert not refused.allowed
    assert refused.retry_after_seconds == expected


def test_redis_keys_expire_once_the_buckets_are_full_again(redis_url: str) -> None:
    prefix = f"dealbase:test:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(redis_url)
    key, tenant = uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(10, 5), Rate(20, 50)
    names = (f"{prefix}:key:{key}", f"{prefix}:tenant:{tenant}")

    async def three_checks() -> list[bool]:
        limiter = RedisLimiter(redis_url, timeout_seconds=1.0, prefix=prefix)
        try:
            return [
                (await limiter.check(key, key_rate, tenant, tenant_rate)).allowed for _ in "abc"
            ]
        finally:
            await limiter.close()

    try:
        assert asyncio.run(three_checks()) == [True] * 3

        key_ttl, tenant_ttl = (client.pttl(name) for name in names)
        # Full again 3 intervals after the first request: 300 ms for the key, 150 for the tenant.
        assert 0 < key_ttl <= 300
        assert 0 < tenant_ttl <= 150
        time.sleep(0.35)
        assert client.exists(*names) == 0
    finally:
        client.close()


def test_concurrent_checks_from_two_redis_clients_admit_exactly_the_burst(redis_url: str) -> None:
    """Two clients (as two server processes), 40 checks in flight at once: the script is atomic."""
    prefix = f"dealbase:test:{uuid.uuid4().hex}"
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(0.2, 10)  # no refill during the test

    async def forty_at_once() -> list[bool]:
        limiters = [RedisLimiter(redis_url, timeout_seconds=2.0, prefix=prefix) for _ in range(2)]
        try:
            verdicts = await asyncio.gather(
                *(limiters[i % 2].check(key, rate, tenant, GENEROUS) for i in range(40))
            )
        finally:
            for limiter in limiters:
                await limiter.close()
        return [verdict.allowed for verdict in verdicts]

    assert sorted(asyncio.run(forty_at_once())) == [False] * 30 + [True] * 10


def test_concurrent_checks_in_process_admit_exactly_the_burst() -> None:
    limiter = InProcessLimiter()
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(0.2, 10)

    async def forty_at_once() -> list[bool]:
        verdicts = await asyncio.gather(
            *(limiter.check(key, rate, tenant, GENEROUS) for _ in range(40))
        )
        return [verdict.allowed for verdict in verdicts]

    assert sorted(asyncio.run(forty_at_once())) == [False] * 30 + [True] * 10
