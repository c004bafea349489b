"""The client address a request's failed authentications count against, and when its allowance
is asked about."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from dealbase.errors import RateLimited
from dealbase.tenancy.rate_limits.admission import LimiterFaults
from dealbase.tenancy.rate_limits.failure_allowance import FailureAllowance, client_address
from dealbase.tenancy.rate_limits.in_process import InProcessLimiter
from dealbase.tenancy.scope import Rate


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::ffff", "2001:db8:1:2::/64"),
        ("::1", "::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv4_address_counts_alone_and_an_ipv6_address_by_its_64(
    host: str, address: str
) -> None:
    assert client_address(host) == address


@pytest.mark.parametrize("host", [None, ""])
def test_no_address_counts_against_none(host: str | None) -> None:
    assert client_address(host) is None


class CountingLimiter(InProcessLimiter):
    """The in-process limiter, counting how often an address's allowance is asked about."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.asked = 0

    async def failure_wait(self, address: str, rate: Rate) -> float:
        self.asked += 1
        return await super().failure_wait(address, rate)


def _allowance(now: list[float]) -> tuple[FailureAllowance, CountingLimiter]:
    limiter = CountingLimiter(lambda: now[0])
    allowance = FailureAllowance(
        limiter,
        rate=Rate(per_second=1.0, burst=3),
        faults=LimiterFaults(fail_closed=False),
        clock=lambda: now[0],
    )
    return allowance, limiter


def test_an_address_without_a_recent_failure_costs_no_question_to_the_limiter() -> None:
    now = [100.0]
    allowance, limiter = _allowance(now)

    async def scenario() -> None:
        for _ in range(5):
            assert await allowance.admit("192.0.2.1")
        assert limiter.asked == 0
        await allowance.spend("192.0.2.1")
        assert await allowance.admit("192.0.2.1")
        assert await allowance.admit("192.0.2.2")
        assert limiter.asked == 1  # the address that failed, not the other
        now[0] += 3.0  # its allowance is full again: no need to ask any more
        assert await allowance.admit("192.0.2.1")
        assert limiter.asked == 1

    asyncio.run(scenario())


def test_an_address_past_its_allowance_is_refused_until_it_may_fail_again() -> None:
    now = [100.0]
    allowance, _ = _allowance(now)

    async def scenario() -> None:
        for _ in range(3):  # the burst
            assert await allowance.admit("192.0.2.1")
            await allowance.spend("192.0.2.1")
        with pytest.raises(RateLimited) as refused:
            await allowance.admit("192.0.2.1")
        assert refused.value.retry_after_seconds is not None
        assert refused.value.retry_after_seconds >= 1
        now[0] += refused.value.retry_after_seconds
        assert await allowance.admit("192.0.2.1")

    asyncio.run(scenario())
