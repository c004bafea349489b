"""RateLimit-Policy and RateLimit response headers (the IETF RateLimit header fields draft),
which the request edge adds to every answer to a request admitted or refused under rate limits."""

from __future__ import annotations

import math

from dealbase.tenancy.rate_limits.limiter import Verdict


def rate_limit_headers(verdict: Verdict) -> list[tuple[bytes, bytes]]:
    """``RateLimit-Policy`` lists both limits (quota = burst, window = seconds to refill it);
    ``RateLimit`` gives the one closest to running out: requests left and seconds to full."""
    if not verdict.buckets:
        return []
    policies = ", ".join(
        f'"{bucket.policy}";q={bucket.rate.burst};w={max(1, math.ceil(bucket.rate.window_seconds))}'
        for bucket in verdict.buckets
    )
    tightest = min(verdict.buckets, key=lambda bucket: bucket.remaining)
    state = f'"{tightest.policy}";r={tightest.remaining};t={math.ceil(tightest.reset_seconds)}'
    return [(b"ratelimit-policy", policies.encode()), (b"ratelimit", state.encode())]
