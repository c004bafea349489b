"""Rate limits per API key and per tenant: GCRA (the generic cell rate algorithm), exact and
cheap — one number of state per bucket, the time at which it is full again.

With Redis, every server process shares the buckets: one atomic Lua script per request checks
both limits on Redis's own clock and spends from both only when both admit. Without Redis, an
in-process limiter with the same arithmetic serves one process.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis
import redis.asyncio
import structlog
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from dealbase.tenancy.scope import Rate

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One limit's answer: ``remaining`` requests could pass now, the bucket is full again in
    ``reset_seconds``, and a refused request may pass after ``retry_after_seconds``."""

    policy: str
    rate: Rate
    remaining: int
    reset_seconds: float
    retry_after_seconds: float


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    buckets: tuple[Bucket, ...]  # empty when the limiter could not be asked (failed open)

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds, at least 1, after which the refused request will pass."""
        waits = [bucket.retry_after_seconds for bucket in self.buckets]
        return max(1, math.ceil(max(waits, default=1.0)))


class RateLimiterUnavailable(Exception):
    """The shared limiter could not answer in time; the caller fails open or closed."""


class RateLimiter(Protocol):
    async def check(
        self, key_id: uuid.UUID, key_rate: Rate, tenant_id: uuid.UUID, tenant_rate: Rate
    ) -> Verdict: ...


def _rescaled(tat_ms: float, stored_interval_ms: float, now_ms: float, rate: Rate) -> float:
    """A bucket's state under a changed rate: the requests it owes, paid at the new pace, so a
    raised limit is in force at once and a lowered one as well."""
    owed = max(tat_ms - now_ms, 0.0) / stored_interval_ms
    return now_ms + owed * rate.interval_ms


def _gcra(tat_ms: float, now_ms: float, rate: Rate) -> tuple[bool, float, float, float]:
    """(allowed, new theoretical arrival time, remaining, wait in ms) for one bucket."""
    new_tat = max(tat_ms, now_ms) + rate.interval_ms
    allow_at = new_tat - rate.interval_ms * rate.burst
    if now_ms < allow_at:
        return False, tat_ms, 0, allow_at - now_ms
    remaining = math.floor((now_ms - allow_at) / rate.interval_ms)
    return True, new_tat, remaining, 0.0


class InProcessLimiter:
    """For a single server process, when there is no Redis; same arithmetic as the script."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._arrivals: dict[str, tuple[float, float]] = {}  # (TAT, interval it was set at)
        self._clock = clock

    async def check(
        self, key_id: uuid.UUID, key_rate: Rate, tenant_id: uuid.UUID, tenant_rate: Rate
    ) -> Verdict:
        # Atomic without a lock: every check of a process runs on its one event loop, and
        # nothing below awaits.
        now = self._clock() * 1000
        limits = (
            ("key", f"key:{key_id}", key_rate),
            ("tenant", f"tenant:{tenant_id}", tenant_rate),
        )
        states = {}
        for _, name, rate in limits:
            tat, interval = self._arrivals.get(name, (now, rate.interval_ms))
            states[name] = _rescaled(tat, interval, now, rate)
        results = [
            (policy, name, rate, _gcra(states[name], now, rate)) for policy, name, rate in limits
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
                    wait / 1000,
                )
            )
        return Verdict(allowed, tuple(buckets))


# KEYS: the key's bucket, the tenant's; ARGV: interval and burst of each. A bucket holds
# "<TAT>:<interval it was set at>", rescaled when the rate changed (as _rescaled). Returns the
# verdict, then per bucket remaining, ms until full and ms to wait, as strings (Lua numbers
# would be truncated). Redis's clock makes the buckets agree across hosts.
_SCRIPT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000
local buckets = {}
local allowed = 1
for i = 1, 2 do
  local interval = tonumber(ARGV[i * 2 - 1])
  local burst = tonumber(ARGV[i * 2])
  local tat = now
  local stored = redis.call('GET', KEYS[i])
  if stored then
    local separator = string.find(stored, ':', 1, true)
    local stored_tat = tonumber(string.sub(stored, 1, separator - 1))
    local stored_interval = tonumber(string.sub(stored, separator + 1))
    tat = now + math.max(stored_tat - now, 0) / stored_interval * interval
  end
  local new_tat = math.max(tat, now) + interval
  local allow_at = new_tat - interval * burst
  if now < allow_at then
    allowed = 0
  end
  buckets[i] = {interval = interval, tat = tat, new_tat = new_tat, allow_at = allow_at}
end
local reply = {allowed}
for i = 1, 2 do
  local b = buckets[i]
  if allowed == 1 then
    redis.call('SET', KEYS[i], tostring(b.new_tat) .. ':' .. tostring(b.interval),
      'PX', math.max(1, math.ceil(b.new_tat - now)))
    table.insert(reply, tostring(math.floor((now - b.allow_at) / b.interval)))
    table.insert(reply, tostring(b.new_tat - now))
    table.insert(reply, '0')
  else
    table.insert(reply, '0')
    table.insert(reply, tostring(math.max(b.tat - now, 0)))
    table.insert(reply, tostring(math.max(b.allow_at - now, 0)))
  end
end
return reply
"""


class RedisLimiter:
    """Buckets shared through Redis, one round trip per request; a Redis that does not answer
    within ``timeout_seconds`` raises RateLimiterUnavailable (the caller decides)."""

    def __init__(
        self, url: str, *, timeout_seconds: float = 0.05, prefix: str = "dealbase:rl"
    ) -> None:
        self._client = redis.asyncio.Redis.from_url(
            url,
            socket_timeout=timeout_seconds,
            # A new pooled connection gets longer: under load, setting one up within the
            # answer's budget failed often enough to fail open needlessly.
            socket_connect_timeout=max(timeout_seconds, 0.25),
            retry_on_timeout=False,
            # A pooled connection that died with a Redis restart fails on its first use; one
            # retry on a fresh connection, so a restart does not fail requests open needlessly.
            retry=Retry(NoBackoff(), retries=1),
            retry_on_error=[redis.ConnectionError],
        )
        self._script = self._client.register_script(_SCRIPT)
        self._prefix = prefix

    async def check(
        self, key_id: uuid.UUID, key_rate: Rate, tenant_id: uuid.UUID, tenant_rate: Rate
    ) -> Verdict:
        try:
            reply = await self._script(
                keys=[f"{self._prefix}:key:{key_id}", f"{self._prefix}:tenant:{tenant_id}"],
                args=[
                    key_rate.interval_ms,
                    key_rate.burst,
                    tenant_rate.interval_ms,
                    tenant_rate.burst,
                ],
            )
        except redis.RedisError as exc:
            raise RateLimiterUnavailable(str(exc)) from exc
        allowed = int(reply[0]) == 1
        buckets = []
        for index, (policy, rate) in enumerate((("key", key_rate), ("tenant", tenant_rate))):
            remaining, until_full, wait = (
                float(value) for value in reply[1 + index * 3 : 4 + index * 3]
            )
            buckets.append(Bucket(policy, rate, int(remaining), until_full / 1000, wait / 1000))
        return Verdict(allowed, tuple(buckets))

    async def close(self) -> None:
        await self._client.aclose()
