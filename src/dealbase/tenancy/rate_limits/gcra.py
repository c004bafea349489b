"""GCRA (the generic cell rate algorithm), the arithmetic of every bucket: one number of state,
the theoretical arrival time (TAT) at which the bucket is full again. The in-process limiter
runs it here; the Redis limiter's Lua script (``limiter``) runs the same on Redis's clock."""

from __future__ import annotations

import math

from dealbase.tenancy.scope import Rate


def rescaled(tat_ms: float, stored_interval_ms: float, now_ms: float, rate: Rate) -> float:
    """A bucket's state under a changed rate: the requests it owes, paid at the new pace, so a
    raised limit is in force at once and a lowered one as well."""
    owed = max(tat_ms - now_ms, 0.0) / stored_interval_ms
    return now_ms + owed * rate.interval_ms


def gcra(
    tat_ms: float, now_ms: float, rate: Rate, cost: int = 1, prepaid: int = 0
) -> tuple[bool, float, float, float]:
    """(allowed, new theoretical arrival time, remaining, wait in ms) for one bucket and a
    request of ``cost`` units, ``prepaid`` of them spent by an earlier check. The wait is until
    the whole cost fits (0 when it does): a refused request pays all of it when sent again."""
    whole = min(cost, rate.burst)
    spend = max(whole - prepaid, 0)
    start = max(tat_ms, now_ms)
    # start + interval * spend - interval * burst, written so that a full bucket of burst 1
    # gives exactly now: the subtraction rounded a ulp above it and refused a new key's first
    # request.
    allow_at = start - rate.interval_ms * (rate.burst - spend)
    wait = max(start - rate.interval_ms * (rate.burst - whole) - now_ms, 0.0)
    if now_ms < allow_at:
        return False, tat_ms, 0, wait
    remaining = math.floor((now_ms - allow_at) / rate.interval_ms)
    return True, start + rate.interval_ms * spend, remaining, wait
