"""The limiter of a single server process, when there is no Redis: the same arithmetic as the
Redis limiter's script (``gcra``), on the process's monotonic clock."""

from __future__ import annotations

import time
from collections.abc import Callable

from dealbase.tenancy.rate_limits.gcra import gcra, rescaled
from dealbase.tenancy.rate_limits.limiter import Bucket, Check, Verdict
from dealbase.tenancy.scope import Rate

# The in-process limiter forgets the failure allowances that are full again (the same as none)
# once it holds this many, and then whenever their number has doubled since: client addresses
# are many, and the memory they take is bounded by the addresses that failed recently.
_FAILURE_SWEEP_SIZE = 1024


class InProcessLimiter:
    """For a single server process, when there is no Redis; same arithmetic as the script."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._arrivals: dict[str, tuple[float, float]] = {}  # (TAT, interval it was set at)
        self._failures: dict[str, tuple[float, float]] = {}  # by address, as _arrivals
        self._sweep_failures_at = _FAILURE_SWEEP_SIZE
        self._clock = clock

    async def check(self, check: Check) -> Verdict:
        # Atomic without a lock: every check of a process runs on its one event loop, and
        # nothing below awaits.
        now = self._clock() * 1000
        limits = (
            ("key", f"key:{check.key_id}", check.key_rate),
            ("tenant", f"tenant:{check.tenant_id}", check.tenant_rate),
        )
        states = {}
        for _, name, rate in limits:
            tat, interval = self._arrivals.get(name, (now, rate.interval_ms))
            states[name] = rescaled(tat, interval, now, rate)
        results = [
            (policy, name, rate, gcra(states[name], now, rate, check.cost, check.prepaid))
            for policy, name, rate in limits
        ]
        allowed = all(result[0] for *_, result in results)
        buckets = []
        for policy, name, rate, (_, new_tat, remaining, wait) in results:
            tat = new_tat if allowed else states[name]
            if allowed:
                self._arrivals[name] = (new_tat, rate.interval_ms)
            buckets.append(
                Bucket(
                    policy,
                    rate,
                    int(remaining) if allowed else 0,
                    max(tat - now, 0) / 1000,
                    0.0 if allowed else wait / 1000,
                )
            )
        return Verdict(allowed, tuple(buckets))

    async def failure_wait(self, address: str, rate: Rate) -> float:
        now = self._clock() * 1000
        _, _, _, wait = gcra(self._failure_tat(address, now, rate), now, rate)
        return wait / 1000

    async def spend_failure(self, address: str, rate: Rate) -> None:
        now = self._clock() * 1000
        tat = max(self._failure_tat(address, now, rate), now) + rate.interval_ms
        self._failures[address] = (tat, rate.interval_ms)
        if len(self._failures) >= self._sweep_failures_at:
            self._failures = {
                name: state for name, state in self._failures.items() if state[0] > now
            }
            self._sweep_failures_at = max(_FAILURE_SWEEP_SIZE, 2 * len(self._failures))

    def _failure_tat(self, address: str, now: float, rate: Rate) -> float:
        tat, interval = self._failures.get(address, (now, rate.interval_ms))
        return rescaled(tat, interval, now, rate)
