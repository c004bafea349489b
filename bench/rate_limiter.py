"""What the rate limiter adds to a request: the CPU and the time of one admission check.

Run: .venv/bin/python bench/rate_limiter.py [--redis redis://127.0.0.1:6379/15]
         [--checks 2000] [--rounds 9] [--loop uvloop|asyncio] [--before GIT_REVISION]

One check (both limits, key and tenant) at a time on one event loop, as a server process asks
them, with limits high enough that every call admits. Measured per limiter:

- CPU per check: time.process_time() over a round of --checks sequential checks, divided by
  --checks. This is what every request pays in the server process, and the figure to compare:
  the machine is shared, so wall time mostly measures the neighbours. The limiters take turns,
  round after round (A, B, C, A, B, C, ...) in one process, and the median round is reported,
  with its ratio to the first Redis limiter's (the one at --before, else RedisLimiter).
- Wall time of one check (median, 99th and 99.9th percentiles over every check of every round):
  the latency a request waits, Redis's own work and the round trip included.

Limiters: the in-process one; RedisLimiter (redis-py's asyncio client, the checks of a turn in
one pipeline); LocalAdmissions over a RedisLimiter of its own, one key far from its limits, on a
clock of its own moved 200 µs a check (a key sent 5,000 requests a second: Redis is asked about
it every 100 checks), each check followed by one turn of the event loop, as a server gives
between requests (what it sends to Redis in the background runs then, and counts in its CPU and
wall figures). With --before, also RedisLimiter as it was at that git revision (limiter.py,
loaded alone: a revision whose RedisLimiter needs no other module of its package, as 41cb94a's
protocol of its own), for before and after figures from one run. Without --redis (and without
DEALBASE_REDIS_URL) only the in-process limiter is measured. The loop defaults to uvloop,
the one `dealbase serve` runs on.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redis.asyncio
import uvloop
from redis.utils import HIREDIS_AVAILABLE

from dealbase.tenancy.rate_limits.in_process import InProcessLimiter
from dealbase.tenancy.rate_limits.limiter import (
    Check,
    RateLimiter,
    RateLimiterUnavailable,
    RedisLimiter,
    Verdict,
)
from dealbase.tenancy.rate_limits.local_admissions import LocalAdmissions
from dealbase.tenancy.scope import Rate

GENEROUS = Rate(per_second=100_000, burst=1_000_000)
TIMEOUT_S = 0.05  # the service's default DEALBASE_REDIS_TIMEOUT_MS
PREFIX = "dealbase:bench"
WARM_UP_CHECKS = 200  # connection, script load
ROOT = Path(__file__).resolve().parent.parent
MODULE = "src/dealbase/tenancy/rate_limits/limiter.py"


def limiter_at(revision: str, url: str) -> RateLimiter:
    """RedisLimiter as it was at a git revision, loaded beside today's."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{MODULE}"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    name = f"rate_limits_at_{revision}"
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{name}.py"
        path.write_bytes(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    # Its faults count as today's do (one_round counts them instead of stopping).
    module.__dict__["RateLimiterUnavailable"] = RateLimiterUnavailable
    limiter: RateLimiter = module.RedisLimiter(url, timeout_seconds=TIMEOUT_S, prefix=PREFIX)
    return limiter


class BusyKey:
    """LocalAdmissions over a RedisLimiter of its own, on a clock moved ``GAP_S`` a check, a
    turn of the event loop after each check."""

    GAP_S = 0.0002

    def __init__(self, url: str) -> None:
        self.now = time.monotonic()
        self.admissions = LocalAdmissions(
            RedisLimiter(url, timeout_seconds=TIMEOUT_S, prefix=PREFIX), clock=lambda: self.now
        )

    async def check(self, check: Check) -> Verdict:
        self.now += self.GAP_S
        verdict = await self.admissions.check(check)
        await asyncio.sleep(0)
        return verdict

    async def close(self) -> None:
        await self.admissions.close()


@dataclass
class Figures:
    cpu_per_check_us: list[float] = field(default_factory=list)  # one per round
    wall_us: list[float] = field(default_factory=list)  # one per check
    unavailable: int = 0  # checks not answered within the timeout (a busy machine)


async def one_round(limiter: RateLimiter, checks: int, figures: Figures) -> None:
    key, tenant = uuid.UUID(int=1), uuid.UUID(int=2)
    wall = figures.wall_us
    started_cpu = time.process_time()
    for _ in range(checks):
        started = time.perf_counter()
        try:
            # A check made for each, as the admission of each request makes one.
            verdict = await limiter.check(Check(key, GENEROUS, tenant, GENEROUS))
        except RateLimiterUnavailable:
            figures.unavailable += 1
            continue
        wall.append((time.perf_counter() - started) * 1_000_000)
        assert verdict.allowed
    figures.cpu_per_check_us.append((time.process_time() - started_cpu) / checks * 1_000_000)


def report(figures: dict[str, Figures], base: str | None) -> None:
    """One line per limiter; CPU also as a ratio to ``base``'s."""
    base_cpu = statistics.median(figures[base].cpu_per_check_us) if base else None
    width = max(len(name) for name in figures)
    print(
        f"{'limiter':<{width}} {'CPU/check':>10} {'ratio':>6} {'wall median':>12}"
        f" {'wall p99':>10} {'wall p99.9':>10} {'timed out':>10}"
    )
    for name, measured in figures.items():
        cpu = statistics.median(measured.cpu_per_check_us)
        ordered = sorted(measured.wall_us)
        p99 = ordered[int(len(ordered) * 0.99) - 1]
        p999 = ordered[int(len(ordered) * 0.999) - 1]
        ratio = f"{cpu / base_cpu:.2f}" if base_cpu else "-"
        print(
            f"{name:<{width}} {cpu:8.1f} µs {ratio:>6} {statistics.median(ordered):9.1f} µs"
            f" {p99:7.1f} µs {p999:7.1f} µs {measured.unavailable:>10}"
        )
    if base:
        print(f"ratio: CPU per check over {base}'s")


async def main(url: str | None, checks: int, rounds: int, before: str | None) -> None:
    limiters: dict[str, RateLimiter] = {}
    if url and before:
        limiters[f"RedisLimiter at {before}"] = limiter_at(before, url)
    if url:
        limiters["RedisLimiter"] = RedisLimiter(url, timeout_seconds=TIMEOUT_S, prefix=PREFIX)
        limiters["LocalAdmissions, a busy key"] = BusyKey(url)
    limiters["in-process"] = InProcessLimiter()
    try:
        for limiter in limiters.values():
            await one_round(limiter, WARM_UP_CHECKS, Figures())
        figures = {name: Figures() for name in limiters}
        for _ in range(rounds):
            for name, limiter in limiters.items():
                await one_round(limiter, checks, figures[name])
    finally:
        for limiter in limiters.values():
            close = getattr(limiter, "close", None)
            if close is not None:
                await close()
    report(figures, next(iter(figures)) if url else None)
    if not url:
        print("Redis not measured: pass --redis URL or set DEALBASE_REDIS_URL")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=os.environ.get("DEALBASE_REDIS_URL"))
    parser.add_argument("--checks", type=int, default=2000, help="checks per round")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per limiter, alternated")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--before", help="also RedisLimiter at this git revision")
    args = parser.parse_args()
    print(
        f"{args.rounds} rounds of {args.checks} checks per limiter, on {args.loop};"
        f" redis-py {redis.__version__}, {'hiredis' if HIREDIS_AVAILABLE else 'its Python'} parser"
    )
    run: Callable[..., None] = uvloop.run if args.loop == "uvloop" else asyncio.run
    run(main(args.redis, args.checks, args.rounds, args.before))


if __name__ == "__main__":
    cli()
