"""Rate limits per API key and per tenant, and the allowance of failed authentications per
client address: GCRA (the generic cell rate algorithm), exact and cheap — one number of state
per bucket, the time at which it is full again.

With Redis, every server process shares the buckets: one atomic Lua script per check tests
both limits on Redis's own clock and spends from both only when both admit, sent through
redis-py's asyncio client, the scripts of one event-loop turn in one pipeline
(``LocalAdmissions`` decides which requests wait for a check: mostly those of keys near a limit;
the others' are admitted in-process, and a check in the background now and then carries them).
Without Redis, ``in_process.InProcessLimiter``, with the same arithmetic (``gcra``), serves one
process.

A request costs a number of units, 1 unless said otherwise (a batch costs more, see
``edge.callers.charge_batch``), and never more than a bucket's burst: a dearer request could
never pass. A request whose size is known only once its body is read pays in two checks, the
first unit on arrival and the rest after (``prepaid``, the units an earlier check spent).

A failure allowance is asked before authentication (how long until the address may fail once
more: the request waits for nothing when the answer is 0) and spent after it only when it failed.
A spend is never refused: failures of requests that were in flight when the allowance ran out are
owed, and paid back at the rate before the address may fail again.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from dataclasses import dataclass
from typing import Protocol

import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from dealbase.config import check_redis_url
from dealbase.tenancy.scope import Rate


# Bucket and Verdict are not frozen: a frozen dataclass sets each field through
# ``object.__setattr__``, and every request a process admits itself makes two buckets and a
# verdict: a large share of ``LocalAdmissions.check``'s work went there. Nothing changes them
# once made.
@dataclass(slots=True)
class Bucket:
    """One limit's answer: ``remaining`` units (a request is one) could be spent now, the bucket is
    full again in ``reset_seconds``, and a refused request may pass after
    ``retry_after_seconds``."""

    policy: str
    rate: Rate
    remaining: int
    reset_seconds: float
    retry_after_seconds: float


@dataclass(slots=True)
class Verdict:
    allowed: bool
    buckets: tuple[Bucket, ...]  # empty when the limiter could not be asked (failed open)

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds, at least 1, after which the refused request will pass."""
        return retry_after(max((bucket.retry_after_seconds for bucket in self.buckets), default=1))


def retry_after(wait_seconds: float) -> int:
    """A wait as a Retry-After: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_seconds))


@dataclass(slots=True)
class Check:
    """What a check asks: to spend ``cost`` units, at most each bucket's burst, less the
    ``prepaid`` ones an earlier check of the same request spent, from the key's bucket and its
    tenant's, or nothing when either refuses. Not frozen, as Bucket and Verdict: every request
    makes one."""

    key_id: uuid.UUID
    key_rate: Rate
    tenant_id: uuid.UUID
    tenant_rate: Rate
    cost: int = 1
    prepaid: int = 0


class RateLimiterUnavailable(Exception):
    """The shared limiter could not answer in time; the caller fails open or closed."""


class RateLimiter(Protocol):
    async def check(self, check: Check) -> Verdict:
        """Spends what ``check`` asks from both buckets, or nothing when either refuses."""
        ...


class FailureLimiter(Protocol):
    """Failed authentications per client address (``tenancy.failure_allowance``)."""

    async def failure_wait(self, address: str, rate: Rate) -> float:
        """Seconds until ``address`` may fail once more; 0 when it may now. Spends nothing."""
        ...

    async def spend_failure(self, address: str, rate: Rate) -> None:
        """Spends one failure of ``address``, past an empty allowance too (then owed)."""
        ...


# What both scripts start with: Redis's clock, and a bucket's TAT as stored in "<TAT>:<interval
# it was set at>", rescaled to the interval asked for (as gcra.rescaled); an empty bucket's is now.
BUCKET_LUA = b"""
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000
local function stored_tat(key, interval)
  local stored = redis.call('GET', key)
  if not stored then
    return now
  end
  local separator = string.find(stored, ':', 1, true)
  local tat = tonumber(string.sub(stored, 1, separator - 1))
  local set_at = tonumber(string.sub(stored, separator + 1))
  return now + math.max(tat - now, 0) / set_at * interval
end
"""


# KEYS: the key's bucket, the tenant's; ARGV: one string of figures separated by spaces (one
# argument rather than seven: redis-py encodes each argument of a command on its own, a
# noticeable part of a check's CPU with seven): interval and burst of each, then the cost and the
# units of it prepaid (as gcra.gcra), then the units owed: admitted by the process without asking
# (``LocalAdmissions``), spent from both buckets first whatever the verdict, past an empty
# bucket too (as a failure's spend). A bucket holds "<TAT>:<interval it was set at>", rescaled when
# the rate changed (as gcra.rescaled). Returns one string: the verdict, then per bucket remaining,
# ms until full and ms to wait, separated by spaces (a single bulk string is the cheapest reply
# to read, and Lua numbers returned as such would be truncated to integers). Redis's clock makes
# the buckets agree across hosts.
SCRIPT = (
    BUCKET_LUA
    + b"""
local figures = {}
for figure in string.gmatch(ARGV[1], '%S+') do
  figures[#figures + 1] = tonumber(figure)
end
local cost = figures[5]
local prepaid = figures[6]
local owed = figures[7]
local buckets = {}
local allowed = 1
for i = 1, 2 do
  local interval = figures[i * 2 - 1]
  local burst = figures[i * 2]
  local whole = math.min(cost, burst)
  local spend = math.max(whole - prepaid, 0)
  local tat = stored_tat(KEYS[i], interval)
  if owed > 0 then
    tat = math.max(tat, now) + interval * owed
  end
  local start = math.max(tat, now)
  local allow_at = start - interval * (burst - spend)
  if now < allow_at then
    allowed = 0
  end
  buckets[i] = {interval = interval, tat = tat, new_tat = start + interval * spend,
    allow_at = allow_at, retry_at = start - interval * (burst - whole)}
end
local reply = {allowed}
for i = 1, 2 do
  local b = buckets[i]
  if allowed == 1 then
    redis.call('SET', KEYS[i], tostring(b.new_tat) .. ':' .. tostring(b.interval),
      'PX', math.max(1, math.ceil(b.new_tat - now)))
    table.insert(reply, string.format('%d', math.floor((now - b.allow_at) / b.interval)))
    table.insert(reply, tostring(b.new_tat - now))
    table.insert(reply, '0')
  else
    if owed > 0 then
      redis.call('SET', KEYS[i], tostring(b.tat) .. ':' .. tostring(b.interval),
        'PX', math.max(1, math.ceil(b.tat - now)))
    end
    table.insert(reply, '0')
    table.insert(reply, tostring(math.max(b.tat - now, 0)))
    table.insert(reply, tostring(math.max(b.retry_at - now, 0)))
  end
end
return table.concat(reply, ' ')
"""
)


# KEYS: the address's failure allowance; ARGV: one string, "wait" or "spend", the interval, the
# burst, separated by spaces (as SCRIPT's figures). The
# bucket as SCRIPT keeps it. "wait" answers the ms until one more failure fits (0: it fits now)
# and writes nothing; "spend" moves the TAT on by one interval whatever it was (never refused)
# and answers "0".
FAILURE_SCRIPT = (
    BUCKET_LUA
    + b"""
local mode, interval, burst = string.match(ARGV[1], '^(%a+) (%S+) (%S+)$')
interval = tonumber(interval)
local tat = stored_tat(KEYS[1], interval)
if mode == 'spend' then
  local new_tat = math.max(tat, now) + interval
  redis.call('SET', KEYS[1], tostring(new_tat) .. ':' .. tostring(interval),
    'PX', math.max(1, math.ceil(new_tat - now)))
  return '0'
end
local allow_at = math.max(tat, now) - interval * (tonumber(burst) - 1)
return tostring(math.max(allow_at - now, 0))
"""
)


class RedisLimiter:
    """Buckets shared through Redis, through redis-py's asyncio client; a Redis that does not
    answer within ``timeout_seconds`` raises RateLimiterUnavailable (the caller decides).

    The scripts asked for in one turn of the event loop (the checks of the requests a turn
    admitted, the failure allowances it asked about) leave together at its end in one pipeline:
    one write for the server, one read for Redis, one connection of the pool, however many they
    are. A script Redis lacks (NOSCRIPT: a new or restarted server) is run again through its
    ``Script``, which loads it. A connection lost unseen (a Redis restart) is retried once on a
    new one (had Redis run the scripts before it died, the retry spends twice); a timeout is
    not retried, and redis-py drops the connection that timed out, so a late reply is never
    read as another request's.
    """

    def __init__(
        self, url: str, *, timeout_seconds: float = 0.05, prefix: str = "dealbase:rl"
    ) -> None:
        check_redis_url(url)
        # A new connection gets longer: under load, setting one up within the answer's budget
        # failed often enough to fail open needlessly.
        connect_timeout = max(timeout_seconds, 0.25)
        # Once more on a connection lost unseen (a Redis restart), never after a timeout.
        retry = Retry(NoBackoff(), retries=1, supported_errors=(redis.ConnectionError,))
        self._client = redis.asyncio.Redis.from_url(
            url,
            socket_timeout=timeout_seconds,
            socket_connect_timeout=connect_timeout,
            retry=retry,
        )
        # The health check's PING waits as long as a connection may take to set up, as it
        # always has (a check's budget would fail readiness on a busy host); a client of its own,
        # since a timeout is a client's setting. It connects when first asked.
        self._pinging = redis.asyncio.Redis.from_url(
            url, socket_timeout=connect_timeout, socket_connect_timeout=connect_timeout, retry=retry
        )
        self._script = self._client.register_script(SCRIPT)
        self._failure_script = self._client.register_script(FAILURE_SCRIPT)
        self._key_prefix = f"{prefix}:key:"
        self._tenant_prefix = f"{prefix}:tenant:"
        self._failure_prefix = f"{prefix}:auth:"
        # The scripts of this turn, not yet sent: (script, keys, figures, the reply's future).
        self._turn: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references

    async def check(self, check: Check, *, owed: int = 0) -> Verdict:
        """``RateLimiter.check``, spending first the ``owed`` units the process admitted
        itself (``LocalAdmissions``), whatever the verdict."""
        key_rate, tenant_rate = check.key_rate, check.tenant_rate
        reply = await self._run(
            self._script,
            (
                f"{self._key_prefix}{check.key_id}".encode(),
                f"{self._tenant_prefix}{check.tenant_id}".encode(),
            ),
            (
                f"{key_rate.interval_ms!r} {key_rate.burst} {tenant_rate.interval_ms!r}"
                f" {tenant_rate.burst} {check.cost} {check.prepaid} {owed}"
            ).encode(),
        )
        allowed, *figures = reply.split(b" ")
        return Verdict(
            allowed == b"1",
            (_bucket("key", key_rate, *figures[:3]), _bucket("tenant", tenant_rate, *figures[3:])),
        )

    async def failure_wait(self, address: str, rate: Rate) -> float:
        reply = await self._run(
            self._failure_script,
            ((self._failure_prefix + address).encode(),),
            b"wait %a %d" % (rate.interval_ms, rate.burst),
        )
        return float(reply) / 1000

    async def spend_failure(self, address: str, rate: Rate) -> None:
        await self._run(
            self._failure_script,
            ((self._failure_prefix + address).encode(),),
            b"spend %a %d" % (rate.interval_ms, rate.burst),
        )

    async def ping(self) -> None:
        """Returns once Redis answers PING; raises RateLimiterUnavailable as ``check`` would."""
        try:
            await self._pinging.ping()
        except (redis.RedisError, OSError) as exc:
            raise _unavailable(exc) from exc

    def _run(
        self, script: AsyncScript, keys: tuple[bytes, ...], figures: bytes
    ) -> asyncio.Future[bytes]:
        """The script's reply, sent with the others of this turn at its end; fails with
        RateLimiterUnavailable when Redis does not give one."""
        loop = asyncio.get_running_loop()
        if not self._turn:
            # A task's first step runs on the loop's next turn, after every check of this one.
            task = loop.create_task(self._send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        future: asyncio.Future[bytes] = loop.create_future()
        self._turn.append((script, keys, figures, future))
        return future

    async def _send(self) -> None:
        calls, self._turn = self._turn, []
        pipeline = self._client.pipeline(transaction=False)
        for script, keys, figures, _ in calls:
            pipeline.evalsha(script.sha, len(keys), *keys, figures)
        try:
            replies = await pipeline.execute(raise_on_error=False)
        except (redis.RedisError, OSError) as exc:  # redis-py's TimeoutError is a RedisError
            for *_, future in calls:
                if not future.done():  # else its caller was cancelled
                    future.set_exception(_unavailable(exc))
            return
        for (script, keys, figures, future), reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):
                try:
                    reply = await script(keys, [figures])
                except (redis.RedisError, OSError) as exc:
                    reply = exc
            if future.done():
                continue
            if isinstance(reply, BaseException):
                future.set_exception(_unavailable(reply))
            else:
                future.set_result(reply)

    async def close(self) -> None:
        for task in list(self._sending):
            await asyncio.wait([task])
        await self._client.aclose()
        await self._pinging.aclose()


_Call = tuple[AsyncScript, tuple[bytes, ...], bytes, "asyncio.Future[bytes]"]


def _unavailable(cause: BaseException) -> RateLimiterUnavailable:
    """The fault for a caller, caused by redis-py's (as ``raise ... from cause``: it is set on a
    future here, not raised)."""
    unavailable = RateLimiterUnavailable(str(cause) or type(cause).__name__)
    unavailable.__cause__ = cause
    return unavailable


def _bucket(
    policy: str, rate: Rate, remaining: bytes, until_full_ms: bytes, wait_ms: bytes
) -> Bucket:
    """One bucket of the script's reply."""
    return Bucket(policy, rate, int(remaining), float(until_full_ms) / 1000, float(wait_ms) / 1000)
