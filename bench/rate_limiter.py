"""What the rate limiter adds to a request: the time of one admission check, measured.

Run: .venv/bin/python bench/rate_limiter.py [--redis redis://127.0.0.1:6379/15] [--checks 5000]
Prints, per limiter, the mean, median and 99th percentile of one check (both limits, key and
tenant), over --checks calls from one thread, with limits high enough that every call admits.
Without --redis (and without DEALBASE_REDIS_URL) only the in-process limiter is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

from dealbase.tenancy.rate_limits import InProcessLimiter, RateLimiter, RedisLimiter
from dealbase.tenancy.scope import Rate

GENEROUS = Rate(per_second=100_000, burst=1_000_000)


async def measure(limiter: RateLimiter, checks: int) -> list[float]:
    """One check at a time on an event loop, as a server process asks them."""
    key, tenant = uuid.uuid4(), uuid.uuid4()
    for _ in range(200):  # warm up: connection, script load
        await limiter.check(key, GENEROUS, tenant, GENEROUS)
    timings = []
    for _ in range(checks):
        started = time.perf_counter()
        verdict = await limiter.check(key, GENEROUS, tenant, GENEROUS)
        timings.append((time.perf_counter() - started) * 1_000_000)
        assert verdict.allowed
    return timings


def report(name: str, timings: list[float]) -> None:
    ordered = sorted(timings)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(
        f"{name:<12} checks={len(timings)}  mean={statistics.fmean(timings):8.1f} µs"
        f"  median={statistics.median(timings):8.1f} µs  p99={p99:8.1f} µs"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis", default=os.environ.get("DEALBASE_REDIS_URL"))
    parser.add_argument("--checks", type=int, default=5000)
    args = parser.parse_args()
    report("in-process", await measure(InProcessLimiter(), args.checks))
    if args.redis:
        limiter = RedisLimiter(args.redis, timeout_seconds=0.05, prefix="dealbase:bench")
        try:
            report("redis", await measure(limiter, args.checks))
        finally:
            await limiter.close()
    else:
        print("redis        not measured: pass --redis URL or set DEALBASE_REDIS_URL")


if __name__ == "__main__":
    asyncio.run(main())
