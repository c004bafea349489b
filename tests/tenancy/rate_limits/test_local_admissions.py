"""LocalAdmissions against a real Redis: which requests a process admits without asking, that
what it admitted is always spent in Redis, that a busy key's refresh is asked in the background
without a request waiting for it, and that near a limit every request is asked.

The process's own clock is a FakeClock the test moves; Redis keeps its own. The rates refill
nothing measurable during a test (a unit every 1,000 s), so Redis's clock does not matter.
Where a test needs a refresh still on its way, the limiter holds its checks until the test lets
them go (``CountingLimiter.held``): an order of events, never a time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dealbase.tenancy.rate_limits import local_admissions
from dealbase.tenancy.rate_limits.limiter import (
    Check,
    RateLimiterUnavailable,
    RedisLimiter,
    Verdict,
)
from dealbase.tenancy.rate_limits.local_admissions import (
    LOCAL_MIN_REMAINING,
    LOCAL_SHARE,
    REFRESH_SECONDS,
    STALE_SECONDS,
    LocalAdmissions,
)
from dealbase.tenancy.scope import Rate
from tests.redis_support import REDIS_HANG_GUARD_SECONDS, closed_port_url, shared_redis_url
from tests.support import FakeClock, logs_of

BIG = Rate(per_second=0.001, burst=1000)
SMALL = Rate(per_second=0.001, burst=LOCAL_MIN_REMAINING - 1)
TENANT = uuid.uuid4()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


class CountingLimiter(RedisLimiter):
    """A RedisLimiter that counts the checks it sends, the owed units they carry and the
    answers it gets; while ``held`` is an Event not yet set, a check waits for it before it goes
    to Redis."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = 0
        self.carried = 0
        self.answered = 0
        self.held: asyncio.Event | None = None

    async def check(self, *args: Any, **kwargs: Any) -> Verdict:
        self.sent += 1
        self.carried += kwargs.get("owed", 0)
        if self.held is not None:
            await self.held.wait()
        verdict = await super().check(*args, **kwargs)
        self.answered += 1
        return verdict


@pytest.fixture
def prefix() -> str:
    return f"dealbase:test:{uuid.uuid4().hex}"


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as loop:
        yield loop


def _limiter(redis_url: str, prefix: str) -> CountingLimiter:
    return CountingLimiter(redis_url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def shared(redis_url: str, prefix: str) -> CountingLimiter:
    return _limiter(redis_url, prefix)


@pytest.fixture
def admissions(
    runner: asyncio.Runner, shared: CountingLimiter, clock: FakeClock
) -> Iterator[LocalAdmissions]:
    admitting = LocalAdmissions(shared, clock=clock)
    yield admitting
    runner.run(admitting.close())


def _spent(runner: asyncio.Runner, redis_url: str, prefix: str, key: uuid.UUID) -> tuple[int, int]:
    """The units spent from a key's bucket and its tenant's, as Redis has them (a check of
    nothing that spends nothing)."""
    return runner.run(_spent_now(redis_url, prefix, key))


async def _spent_now(redis_url: str, prefix: str, key: uuid.UUID) -> tuple[int, int]:
    """``_spent``, on the running loop."""
    probe = RedisLimiter(redis_url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)
    try:
        verdict = await probe.check(Check(key, BIG, TENANT, BIG, cost=0))
    finally:
        await probe.close()
    key_bucket, tenant_bucket = verdict.buckets
    return BIG.burst - key_bucket.remaining, BIG.burst - tenant_bucket.remaining


@dataclass(frozen=True)
class Process:
    """A process's LocalAdmissions over a CountingLimiter (``shared``), on a clock the test
    moves, with the loop its checks run on and the Redis keys its buckets are kept under."""

    runner: asyncio.Runner
    shared: CountingLimiter
    admissions: LocalAdmissions
    clock: FakeClock
    redis_url: str
    prefix: str

    def check(
        self, key: uuid.UUID, rate: Rate = BIG, tenant_rate: Rate = BIG, **options: int
    ) -> Verdict:
        """The verdict on a request of ``key`` (of the tenant TENANT), run to its end."""
        return self.runner.run(
            self.admissions.check(Check(key, rate, TENANT, tenant_rate, **options))
        )

    def spent(self, key: uuid.UUID) -> tuple[int, int]:
        return _spent(self.runner, self.redis_url, self.prefix, key)

    async def spent_now(self, key: uuid.UUID) -> tuple[int, int]:
        return await _spent_now(self.redis_url, self.prefix, key)


@pytest.fixture
def process(
    runner: asyncio.Runner,
    shared: CountingLimiter,
    admissions: LocalAdmissions,
    clock: FakeClock,
    redis_url: str,
    prefix: str,
) -> Process:
    return Process(runner, shared, admissions, clock, redis_url, prefix)


def _at_once(check: Coroutine[Any, Any, Verdict]) -> Verdict:
    """The verdict of a check that finishes in its first step: it waited for nothing, no turn
    of the event loop, so no answer from Redis. Fails when the check would have waited."""
    with pytest.raises(StopIteration) as finished:
        check.send(None)
    verdict: Verdict = finished.value.value
    return verdict


def test_a_key_far_from_its_limits_is_admitted_without_asking_until_the_refresh(
    process: Process,
) -> None:
    key = uuid.uuid4()
    verdicts = [process.check(key) for _ in range(50)]
    assert all(verdict.allowed for verdict in verdicts)
    assert process.shared.sent == 1
    # The answers count down as Redis's would.
    assert [v.buckets[0].remaining for v in verdicts[:3]] == [999, 998, 997]
    assert process.spent(key) == (1, 1)

    # The refreshing request is admitted here too; its check of nothing carries the 49 owed
    # and its own unit.
    process.clock.advance(REFRESH_SECONDS)
    assert process.check(key).allowed
    process.runner.run(process.admissions.refreshed())
    assert (process.shared.sent, process.shared.carried) == (2, 50)
    assert process.spent(key) == (51, 51)
    # What Redis said is fresh again: admitted here, nothing sent.
    verdict = process.check(key)
    assert process.shared.sent == 2
    assert verdict.buckets[0].remaining == BIG.burst - 52


def test_the_refreshing_request_is_answered_before_redis_is_asked(process: Process) -> None:
    """The request past REFRESH_SECONDS finishes without a turn of the event loop while its
    refresh is held; the requests after it, while the refresh is on its way, start no other;
    the refresh, let go, spends the units it carries (the later ones stay owed)."""
    key = uuid.uuid4()

    async def requests() -> None:
        for _ in range(10):
            await process.admissions.check(Check(key, BIG, TENANT, BIG))
        process.clock.advance(REFRESH_SECONDS)
        held = process.shared.held = asyncio.Event()

        verdict = _at_once(process.admissions.check(Check(key, BIG, TENANT, BIG)))
        assert verdict.allowed
        assert verdict.buckets[0].remaining == BIG.burst - 11
        for _ in range(5):
            assert _at_once(process.admissions.check(Check(key, BIG, TENANT, BIG))).allowed
        await asyncio.sleep(0)  # the refresh's task reaches Redis's door and waits there
        assert (process.shared.sent, process.shared.answered) == (2, 1)
        assert await process.spent_now(key) == (1, 1)

        held.set()
        await process.admissions.refreshed()
        assert (process.shared.sent, process.shared.carried, process.shared.answered) == (2, 10, 2)
        assert await process.spent_now(key) == (11, 11)

    process.runner.run(requests())


def test_a_refresh_redis_does_not_answer_is_logged_and_the_requests_wait_once_stale(
    process: Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis gone (a limiter on a closed port): the refreshing request is admitted, the
    refresh's fault logged, not raised; no other refresh is started; once what Redis said is
    STALE_SECONDS old the requests wait for Redis and meet the fault; Redis back, the next check
    carries every unit owed meanwhile."""
    key = uuid.uuid4()
    for _ in range(10):
        process.check(key)
    gone = _limiter(closed_port_url(), process.prefix)
    process.admissions.shared = gone
    process.clock.advance(REFRESH_SECONDS)
    with logs_of(monkeypatch, local_admissions) as logs:
        assert process.check(key).allowed
        process.runner.run(process.admissions.refreshed())
        assert [(entry["event"], entry["log_level"], entry["units"]) for entry in logs] == [
            ("rate_limit_refresh_failed", "warning", 10)
        ]
        assert gone.sent == 1
        for _ in range(5):
            assert process.check(key).allowed
        assert gone.sent == 1

        process.clock.advance(STALE_SECONDS)
        with pytest.raises(RateLimiterUnavailable):
            process.check(key)
        assert gone.sent == 2

        process.admissions.shared = process.shared
        assert process.check(key).allowed
    process.runner.run(gone.close())
    assert (process.shared.sent, process.shared.carried) == (2, 15)
    assert process.spent(key) == (17, 17)


def test_closing_waits_for_the_refresh_on_its_way_then_spends_what_is_still_owed(
    runner: asyncio.Runner, redis_url: str, prefix: str
) -> None:
    clock = FakeClock()
    shared = _limiter(redis_url, prefix)
    admissions = LocalAdmissions(shared, clock=clock)
    key = uuid.uuid4()

    async def requests() -> None:
        for _ in range(10):
            await admissions.check(Check(key, BIG, TENANT, BIG))
        clock.advance(REFRESH_SECONDS)
        held = shared.held = asyncio.Event()
        await admissions.check(Check(key, BIG, TENANT, BIG))  # its refresh carries 10
        for _ in range(5):
            await admissions.check(Check(key, BIG, TENANT, BIG))

        closing = asyncio.create_task(admissions.close())
        for _ in range(10):
            await asyncio.sleep(0)
        assert not closing.done()
        assert (shared.sent, shared.answered) == (2, 1)  # close sent nothing yet

        held.set()
        await closing

    runner.run(requests())
    assert (shared.sent, shared.carried, shared.answered) == (3, 15, 3)
    assert _spent(runner, redis_url, prefix, key) == (16, 16)


def test_a_process_admits_a_quarter_of_what_was_left_before_asking_again(process: Process) -> None:
    key = uuid.uuid4()
    for _ in range(1 + 999 // LOCAL_SHARE):
        process.check(key, BIG, Rate(0.001, 100_000))
    assert process.shared.sent == 1
    process.check(key, BIG, Rate(0.001, 100_000))
    assert (process.shared.sent, process.shared.carried) == (2, 999 // LOCAL_SHARE)


def test_near_a_limit_every_request_is_asked_and_the_burst_holds_exactly(process: Process) -> None:
    key = uuid.uuid4()
    verdicts = [process.check(key, SMALL, BIG) for _ in range(120)]
    assert process.shared.sent == 120
    assert sum(verdict.allowed for verdict in verdicts) == SMALL.burst


def test_what_redis_said_too_long_ago_admits_nothing(process: Process) -> None:
    key = uuid.uuid4()
    process.check(key)
    process.clock.advance(STALE_SECONDS)
    process.check(key)
    process.check(key)
    assert process.shared.sent == 2  # the second answer is fresh again: the third is admitted here


def test_a_changed_rate_is_asked_in_redis(process: Process) -> None:
    key = uuid.uuid4()
    process.check(key)
    lowered = Rate(0.001, 500)
    verdict = process.check(key, lowered, BIG)
    assert process.shared.sent == 2
    assert verdict.buckets[0].rate == lowered


def test_a_batch_is_asked_in_redis_and_carries_what_is_owed(process: Process) -> None:
    key = uuid.uuid4()
    for _ in range(10):
        process.check(key)
    process.check(key, cost=25, prepaid=1)
    assert (process.shared.sent, process.shared.carried) == (2, 9)
    assert process.spent(key) == (10 + 24, 10 + 24)


def test_closing_spends_in_redis_what_was_admitted_here(
    runner: asyncio.Runner, redis_url: str, prefix: str
) -> None:
    admissions = LocalAdmissions(_limiter(redis_url, prefix), clock=FakeClock())
    keys = [uuid.uuid4() for _ in range(3)]
    for key in keys:
        for _ in range(20):
            runner.run(admissions.check(Check(key, BIG, TENANT, BIG)))
    runner.run(admissions.close())
    assert [_spent(runner, redis_url, prefix, key)[0] for key in keys] == [20, 20, 20]
    assert _spent(runner, redis_url, prefix, keys[0])[1] == 60


def test_units_owed_are_spent_even_when_the_check_carrying_them_is_refused(
    runner: asyncio.Runner, redis_url: str, prefix: str
) -> None:
    limiter = RedisLimiter(redis_url, timeout_seconds=REDIS_HANG_GUARD_SECONDS, prefix=prefix)
    key = uuid.uuid4()
    try:
        runner.run(limiter.check(Check(key, BIG, TENANT, BIG, cost=990)))
        refused = runner.run(limiter.check(Check(key, BIG, TENANT, BIG, cost=20), owed=5))
    finally:
        runner.run(limiter.close())
    assert not refused.allowed
    assert _spent(runner, redis_url, prefix, key) == (995, 995)


def test_two_processes_taking_turns_on_a_key_admit_its_burst_and_spend_every_unit(
    runner: asyncio.Runner, redis_url: str, prefix: str
) -> None:
    """Two processes taking turns, each admitting a quarter of what it last heard was left:
    between them exactly the burst (the last hundred asked one by one), every unit spent."""
    clock = FakeClock()
    processes = [LocalAdmissions(_limiter(redis_url, prefix), clock=clock) for _ in range(2)]
    key = uuid.uuid4()

    async def requests() -> list[bool]:
        allowed = []
        for turn in range(3000):
            if turn % 7 == 0:
                clock.advance(REFRESH_SECONDS / 3)
            verdict = await processes[turn % 2].check(Check(key, BIG, TENANT, BIG))
            allowed.append(verdict.allowed)
        return allowed

    allowed = runner.run(requests())
    for process in processes:
        runner.run(process.close())
    assert sum(allowed) == BIG.burst
    assert _spent(runner, redis_url, prefix, key) == (BIG.burst, BIG.burst)


def test_keys_forgotten_past_the_bound_leave_one_record_of_their_tenant(
    process: Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_REMEMBERED keys, those owing nothing are forgotten; a tenant's keys still share
    one record of it, so what its keys admit here is held to one quarter of its budget."""
    monkeypatch.setattr(local_admissions, "MAX_REMEMBERED", 2)
    tenant_rate = Rate(per_second=0.001, burst=400)
    keys = [uuid.uuid4() for _ in range(4)]
    for key in keys:
        process.check(key, BIG, tenant_rate)
    assert process.shared.sent == 4
    for turn in range(150):
        process.check(keys[2 + turn % 2], BIG, tenant_rate)
    # About 396 left when last heard: a quarter, 99, admitted here before the next check.
    assert process.shared.sent > 4
