"""RateLimit-Policy and RateLimit response headers (the IETF RateLimit header fields draft),
which the request edge adds to every answer to a request admitted or refused under rate limits."""

from __future__ import annotations

import math
from functools import lru_cache

from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Rate


def rate_limit_headers(verdict: Verdict) -> list[tuple[bytes, bytes]]:
    """``RateLimit-Policy`` lists both limits (quota = burst, window = seconds to refill it);
    ``RateLimit`` gives the one closest to running out: requests left and seconds to full."""
    buckets = verdict.buckets
    if not buckets:
        return []
    policies = _policy_field(*[(bucket.policy, bucket.rate) for bucket in buckets])
    tightest = buckets[0]
    for bucket in buckets:
        if bucket.remaining < tightest.remaining:
            tightest = bucket
    state = f'"{tightest.policy}";r={tightest.remaining};t={math.ceil(tightest.reset_seconds)}'
    return [(b"ratelimit-policy", policies), (b"ratelimit", state.encode())]


@lru_cache(maxsize=1024)
def _policy_field(*limits: tuple[str, Rate]) -> bytes:
    """The ``RateLimit-Policy`` of these limits, written once for each (the same rates serve
    request after request, and writing it for each was a cost of its own)."""
    return ", ".join(
        f'"{policy}";q={rate.burst};w={max(1, math.ceil(rate.window_seconds))}'
        for policy, rate in limits
    ).encode()
