"""Rate limits per API key and per tenant, and the allowance of failed authentications per
client address: GCRA (the generic cell rate algorithm), exact and cheap — one number of state
per bucket, the time at which it is full again.

With Redis, every server process shares the buckets: one atomic Lua script per check tests
both limits on Redis's own clock and spends from both only when both admit, sent over a lean
pipelined connection of the limiter's own (``LocalAdmissions`` decides which requests need a
check: those of keys near a limit, and one now and then of the others). Without Redis, an
in-process limiter with the same arithmetic serves one process.

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
import hashlib
import math
import ssl
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import parse_qs, unquote, urlsplit

import structlog

from dealbase.tenancy.scope import Rate

log = structlog.get_logger(__name__)


# Bucket and Verdict are not frozen: a frozen dataclass sets each field through
# ``object.__setattr__``, and every request a process admits itself makes two buckets and a
# verdict (15K of the 43K instructions of ``LocalAdmissions.check``, bench/README.md). Nothing
# changes them once made.
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


class RateLimiterUnavailable(Exception):
    """The shared limiter could not answer in time; the caller fails open or closed."""


class RateLimiter(Protocol):
    async def check(
        self,
        key_id: uuid.UUID,
        key_rate: Rate,
        tenant_id: uuid.UUID,
        tenant_rate: Rate,
        *,
        cost: int = 1,
        prepaid: int = 0,
    ) -> Verdict:
        """Spends ``cost`` units, at most each bucket's burst, less the ``prepaid`` ones an
        earlier check of the same request spent, from both buckets, or nothing when either
        refuses."""
        ...


class FailureLimiter(Protocol):
    """Failed authentications per client address (``tenancy.failure_allowance``)."""

    async def failure_wait(self, address: str, rate: Rate) -> float:
        """Seconds until ``address`` may fail once more; 0 when it may now. Spends nothing."""
        ...

    async def spend_failure(self, address: str, rate: Rate) -> None:
        """Spends one failure of ``address``, past an empty allowance too (then owed)."""
        ...


def _rescaled(tat_ms: float, stored_interval_ms: float, now_ms: float, rate: Rate) -> float:
    """A bucket's state under a changed rate: the requests it owes, paid at the new pace, so a
    raised limit is in force at once and a lowered one as well."""
    owed = max(tat_ms - now_ms, 0.0) / stored_interval_ms
    return now_ms + owed * rate.interval_ms


def _gcra(
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

    async def check(
        self,
        key_id: uuid.UUID,
        key_rate: Rate,
        tenant_id: uuid.UUID,
        tenant_rate: Rate,
        *,
        cost: int = 1,
        prepaid: int = 0,
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
            (policy, name, rate, _gcra(states[name], now, rate, cost, prepaid))
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
        _, _, _, wait = _gcra(self._failure_tat(address, now, rate), now, rate)
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
        return _rescaled(tat, interval, now, rate)


# What both scripts start with: Redis's clock, and a bucket's TAT as stored in "<TAT>:<interval
# it was set at>", rescaled to the interval asked for (as _rescaled); an empty bucket's is now.
_BUCKET_LUA = b"""
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


# KEYS: the key's bucket, the tenant's; ARGV: interval and burst of each, then the cost and the
# units of it prepaid (as _gcra), then the units owed: admitted by the process without asking
# (``LocalAdmissions``), spent from both buckets first whatever the verdict, past an empty
# bucket too (as a failure's spend). A bucket holds "<TAT>:<interval it was set at>", rescaled when
# the rate changed (as _rescaled). Returns one string: the verdict, then per bucket remaining,
# ms until full and ms to wait, separated by spaces (a single bulk string is the cheapest reply
# to read, and Lua numbers returned as such would be truncated to integers). Redis's clock makes
# the buckets agree across hosts.
_SCRIPT = (
    _BUCKET_LUA
    + b"""
local cost = tonumber(ARGV[5])
local prepaid = tonumber(ARGV[6])
local owed = tonumber(ARGV[7])
local buckets = {}
local allowed = 1
for i = 1, 2 do
  local interval = tonumber(ARGV[i * 2 - 1])
  local burst = tonumber(ARGV[i * 2])
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


# KEYS: the address's failure allowance; ARGV: "wait" or "spend", the interval, the burst. The
# bucket as _SCRIPT keeps it. "wait" answers the ms until one more failure fits (0: it fits now)
# and writes nothing; "spend" moves the TAT on by one interval whatever it was (never refused)
# and answers "0".
_FAILURE_SCRIPT = (
    _BUCKET_LUA
    + b"""
local interval = tonumber(ARGV[2])
local tat = stored_tat(KEYS[1], interval)
if ARGV[1] == 'spend' then
  local new_tat = math.max(tat, now) + interval
  redis.call('SET', KEYS[1], tostring(new_tat) .. ':' .. tostring(interval),
    'PX', math.max(1, math.ceil(new_tat - now)))
  return '0'
end
local allow_at = math.max(tat, now) - interval * (tonumber(ARGV[3]) - 1)
return tostring(math.max(allow_at - now, 0))
"""
)


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _command(*parts: bytes) -> bytes:
    """A whole command in the Redis protocol (RESP): an array of bulk strings."""
    return b"*%d\r\n" % len(parts) + b"".join(map(_bulk, parts))


# A check's command: one of these heads (the command, the script's sha or the script, the number
# of keys), then the 2 keys and 7 arguments, packed per check. EVAL carries the script itself,
# for a Redis that lacks it (NOSCRIPT: a new or restarted server), and leaves it in Redis's
# cache for the EVALSHAs after.
_SCRIPT_SHA = hashlib.sha1(_SCRIPT, usedforsecurity=False).hexdigest().encode()
_EVALSHA_HEAD = b"*12\r\n" + _bulk(b"EVALSHA") + _bulk(_SCRIPT_SHA) + _bulk(b"2")
_EVAL_HEAD = b"*12\r\n" + _bulk(b"EVAL") + _bulk(_SCRIPT) + _bulk(b"2")
# The failure allowance's: the head, then its key and 3 arguments.
_FAILURE_SHA = hashlib.sha1(_FAILURE_SCRIPT, usedforsecurity=False).hexdigest().encode()
_FAILURE_HEADS = (
    b"*7\r\n" + _bulk(b"EVALSHA") + _bulk(_FAILURE_SHA) + _bulk(b"1"),
    b"*7\r\n" + _bulk(b"EVAL") + _bulk(_FAILURE_SCRIPT) + _bulk(b"1"),
)
# Replies in RESP2 (the protocol a new connection speaks): "+OK", "-ERR ...", "$<length>".
_SIMPLE, _ERROR, _BULK = ord("+"), ord("-"), ord("$")
# A timer can fire a little before the deadline it was set for (an event loop's clock ticks in
# milliseconds): a request this close to its deadline is given up rather than timed again.
_TIMER_SLACK_S = 0.001
_REDIS_PORT = 6379


class _ReplyError(Exception):
    """Redis answered with an error (``-ERR ...``, ``-NOSCRIPT ...``, ``-BUSY ...``)."""


class _ConnectionLost(ConnectionError):
    """The connection closed with this request unanswered."""


class _Connection(asyncio.Protocol):
    """One connection to Redis carrying any number of requests at once (pipelining): each is
    written when asked and Redis answers in order, so a reply belongs to the oldest request
    still waiting. One socket, no pool to check out from, replies read as they arrive (no
    stream reader), and one timer for all requests rather than one each. The commands asked for
    in one turn of the event loop (the requests a turn admitted) are written together at its
    end: one system call for the server and one read for Redis, however many they are.

    A request not answered within its timeout fails with TimeoutError. Its reply may still come
    and is then dropped in turn, so no later request ever reads it. The connection also stops
    taking requests (as redis-py drops a connection that timed out: it may be half-open, or its
    Redis stalled) and closes once nothing waits on it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.usable = False  # takes new requests: connected, and no request of it timed out
        self._transport: asyncio.Transport | None = None
        # (the request's future, its deadline on the loop's clock), oldest first.
        self._waiting: deque[tuple[asyncio.Future[bytes], float]] = deque()
        self._unread = b""  # the start of a reply not yet whole
        self._unsent: list[bytes] = []  # commands of this turn, written at its end
        # One timer for the whole queue, not one per request: it is due at or before the
        # earliest deadline still waiting, and is moved on only when it fires.
        self._timer: asyncio.TimerHandle | None = None
        self._closed: asyncio.Future[None] = loop.create_future()

    def request(self, command: bytes, timeout: float) -> asyncio.Future[bytes]:
        """Sends ``command`` (whole, in RESP); the future is its reply, a bulk or simple
        string, or fails: _ReplyError, TimeoutError, _ConnectionLost."""
        transport = self._transport
        if transport is None or transport.is_closing():
            # Closed while its loss is not yet seen (connection_lost comes on the next turn).
            raise _ConnectionLost("connection to Redis closed")
        future = self.loop.create_future()
        # Deadlines are in the order of the queue: a connection's requests share one timeout.
        deadline = self.loop.time() + timeout
        self._waiting.append((future, deadline))
        if not self._unsent:
            self.loop.call_soon(self._send)
        self._unsent.append(command)
        if self._timer is None:
            self._timer = self.loop.call_at(deadline, self._expire)
        return future

    def _send(self) -> None:
        unsent, self._unsent = self._unsent, []
        transport = self._transport
        # Lost meanwhile: connection_lost has failed their requests.
        if transport is not None and not transport.is_closing():
            transport.writelines(unsent)

    def close(self) -> None:
        self.usable = False
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is one without deriving from asyncio.Transport).
        self._transport = cast("asyncio.Transport", transport)
        self.usable = True

    def data_received(self, data: bytes) -> None:
        buffer = self._unread + data if self._unread else data
        size = len(buffer)
        position = 0
        while position < size:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                break
            kind = buffer[position]
            reply: bytes | _ReplyError
            if kind == _BULK:
                start = line_end + 2
                end = start + int(buffer[position + 1 : line_end])
                if end < start:  # a nil: no reply of the commands sent here is one
                    self._abort("Redis answered nil")
                    return
                if end + 2 > size:
                    break
                reply = buffer[start:end]
                position = end + 2
            elif kind == _SIMPLE:
                reply = buffer[position + 1 : line_end]
                position = line_end + 2
            elif kind == _ERROR:
                reply = _ReplyError(buffer[position + 1 : line_end].decode(errors="replace"))
                position = line_end + 2
            else:
                self._abort(f"unexpected reply from Redis: {buffer[position:line_end]!r}")
                return
            if not self._waiting:
                self._abort("a reply from Redis with no request waiting")
                return
            future, _ = self._waiting.popleft()
            if not future.done():  # else it timed out, or its caller was cancelled
                if isinstance(reply, _ReplyError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        self._unread = buffer[position:]
        if not self.usable:
            self._close_when_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        reason = f": {exc}" if exc else ""
        for future, _ in self._waiting:
            if not future.done():
                future.set_exception(_ConnectionLost(f"connection to Redis lost{reason}"))
        self._waiting.clear()
        if not self._closed.done():
            self._closed.set_result(None)

    def _expire(self) -> None:
        self._timer = None
        now = self.loop.time() + _TIMER_SLACK_S
        for future, deadline in self._waiting:
            if future.done():
                continue
            if deadline > now:
                self._timer = self.loop.call_at(deadline, self._expire)
                return
            future.set_exception(TimeoutError("Redis did not answer in time"))
            self.usable = False
        self._close_when_idle()

    def _close_when_idle(self) -> None:
        if not self.usable and all(future.done() for future, _ in self._waiting):
            self.close()

    def _abort(self, reason: str) -> None:
        """A reply this client cannot place: nothing after it on the connection can be trusted."""
        log.error("redis_protocol_error", reason=reason)
        self.usable = False
        if self._transport is not None:
            self._transport.abort()


def check_redis_url(url: str) -> None:
    """Raises ValueError, naming the problem, for a URL RedisLimiter cannot connect with."""
    _Endpoint.of(url)


@dataclass(frozen=True, slots=True)
class _Endpoint:
    """Where Redis listens (from its URL), and the commands that set up a new connection."""

    host: str
    port: int
    path: str | None  # a unix socket's, instead of host and port
    tls: ssl.SSLContext | None
    setup: tuple[bytes, ...]  # AUTH and SELECT, as needed

    @classmethod
    def of(cls, url: str) -> _Endpoint:
        """redis://[[user]:password@]host[:port][/db], rediss:// (TLS, the system's trusted
        certificates), unix://[[user]:password@]/path[?db=N]."""
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        if set(query) - {"db"}:
            raise ValueError(f"Redis URL: unsupported parameters {sorted(set(query) - {'db'})}")
        if parts.scheme == "unix":
            db = query.get("db", ["0"])[-1]
        elif parts.scheme in ("redis", "rediss"):
            db = query.get("db", [parts.path.strip("/") or "0"])[-1]
        else:
            raise ValueError("Redis URL: the scheme must be redis://, rediss:// or unix://")
        if not db.isdigit():
            raise ValueError(f"Redis URL: the database must be a number, not {db!r}")
        setup = []
        if parts.password is not None:
            user = [unquote(parts.username).encode()] if parts.username else []
            setup.append(_command(b"AUTH", *user, unquote(parts.password).encode()))
        elif parts.username:
            raise ValueError("Redis URL: a user name without a password")
        if int(db):
            setup.append(_command(b"SELECT", db.encode()))
        if parts.scheme == "unix":
            return cls("", 0, parts.path, None, tuple(setup))
        tls = ssl.create_default_context() if parts.scheme == "rediss" else None
        return cls(
            parts.hostname or "localhost", parts.port or _REDIS_PORT, None, tls, tuple(setup)
        )


def _bucket(
    policy: str, rate: Rate, remaining: bytes, until_full_ms: bytes, wait_ms: bytes
) -> Bucket:
    """One bucket of the script's reply."""
    return Bucket(policy, rate, int(remaining), float(until_full_ms) / 1000, float(wait_ms) / 1000)


class RedisLimiter:
    """Buckets shared through Redis, one round trip per call (a request asks its address's
    failure allowance, then checks its limits); a Redis that does not answer within
    ``timeout_seconds`` raises RateLimiterUnavailable (the caller decides).

    The checks of a process share one pipelined connection (_Connection) rather than going
    through redis-py, whose general machinery (connection pool, retry wrapper, stream reader,
    reply parser, a timeout per write and read) cost three to four times the CPU per check that
    this path does (bench/rate_limiter.py, figures in bench/README.md). The connection opens on
    first use, and again after it was lost or gave up on a request.
    """

    def __init__(
        self, url: str, *, timeout_seconds: float = 0.05, prefix: str = "dealbase:rl"
    ) -> None:
        if not prefix.isascii():  # the commands below count lengths in characters
            raise ValueError("the key prefix must be ASCII")
        self._endpoint = _Endpoint.of(url)
        self._timeout = timeout_seconds
        # A new connection gets longer: under load, setting one up within the answer's budget
        # failed often enough to fail open needlessly.
        self._connect_timeout = max(timeout_seconds, 0.25)
        # Each key's bulk string up to the uuid, whose text is always 36 characters long.
        self._key_head = f"${len(prefix) + 5 + 36}\r\n{prefix}:key:"
        self._tenant_head = f"${len(prefix) + 8 + 36}\r\n{prefix}:tenant:"
        self._failure_prefix = f"{prefix}:auth:".encode()
        self._connection: _Connection | None = None
        self._opening: asyncio.Task[_Connection] | None = None  # shared by concurrent checks
        self._closed = False

    async def check(
        self,
        key_id: uuid.UUID,
        key_rate: Rate,
        tenant_id: uuid.UUID,
        tenant_rate: Rate,
        *,
        cost: int = 1,
        prepaid: int = 0,
        owed: int = 0,
    ) -> Verdict:
        """``RateLimiter.check``, spending first the ``owed`` units the process admitted
        itself (``LocalAdmissions``), whatever the verdict."""
        key_interval, key_burst = repr(key_rate.interval_ms), str(key_rate.burst)
        tenant_interval, tenant_burst = repr(tenant_rate.interval_ms), str(tenant_rate.burst)
        units, paid, spent = str(cost), str(prepaid), str(owed)
        # The keys and arguments after EVALSHA <sha> 2, packed in one go.
        arguments = (
            f"{self._key_head}{key_id}\r\n{self._tenant_head}{tenant_id}\r\n"
            f"${len(key_interval)}\r\n{key_interval}\r\n${len(key_burst)}\r\n{key_burst}\r\n"
            f"${len(tenant_interval)}\r\n{tenant_interval}\r\n"
            f"${len(tenant_burst)}\r\n{tenant_burst}\r\n"
            f"${len(units)}\r\n{units}\r\n${len(paid)}\r\n{paid}\r\n"
            f"${len(spent)}\r\n{spent}\r\n"
        ).encode()
        reply = await self._run(_EVALSHA_HEAD, _EVAL_HEAD, arguments)
        allowed, *figures = reply.split(b" ")
        return Verdict(
            allowed == b"1",
            (_bucket("key", key_rate, *figures[:3]), _bucket("tenant", tenant_rate, *figures[3:])),
        )

    async def failure_wait(self, address: str, rate: Rate) -> float:
        reply = await self._run(*_FAILURE_HEADS, self._failure_arguments(b"wait", address, rate))
        return float(reply) / 1000

    async def spend_failure(self, address: str, rate: Rate) -> None:
        await self._run(*_FAILURE_HEADS, self._failure_arguments(b"spend", address, rate))

    def _failure_arguments(self, mode: bytes, address: str, rate: Rate) -> bytes:
        return b"".join(
            map(
                _bulk,
                (
                    self._failure_prefix + address.encode(),
                    mode,
                    repr(rate.interval_ms).encode(),
                    str(rate.burst).encode(),
                ),
            )
        )

    async def _run(self, evalsha_head: bytes, eval_head: bytes, arguments: bytes) -> bytes:
        """A script's reply; raises RateLimiterUnavailable when Redis does not give one."""
        try:
            try:
                return await self._evaluate(evalsha_head, eval_head, arguments)
            except _ConnectionLost:
                # A connection that died with its Redis (a restart) fails on its first use
                # when the loop had not yet seen it close: once more on a new connection, so a
                # restart does not fail a request needlessly. (Had Redis run the script before
                # the connection died, the retry spends twice, as redis-py's retry would.)
                return await self._evaluate(evalsha_head, eval_head, arguments)
        except (OSError, _ReplyError) as exc:  # TimeoutError and ConnectionError are OSErrors
            raise RateLimiterUnavailable(str(exc) or type(exc).__name__) from exc

    async def ping(self) -> None:
        """Returns once Redis answers PING; raises RateLimiterUnavailable as ``check`` would."""
        try:
            connection = self._ready() or await self._connected()
            await connection.request(_command(b"PING"), self._connect_timeout)
        except (OSError, _ReplyError) as exc:
            raise RateLimiterUnavailable(str(exc) or type(exc).__name__) from exc

    async def _evaluate(self, evalsha_head: bytes, eval_head: bytes, arguments: bytes) -> bytes:
        """The script's reply: EVALSHA, then EVAL when this Redis does not have the script."""
        connection = self._ready() or await self._connected()
        try:
            return await connection.request(evalsha_head + arguments, self._timeout)
        except _ReplyError as error:
            if not str(error).startswith("NOSCRIPT"):
                raise
        connection = self._ready() or await self._connected()
        return await connection.request(eval_head + arguments, self._timeout)

    def _ready(self) -> _Connection | None:
        """The connection when it takes requests from this event loop (a connection belongs to
        the loop that opened it; a test may ask from several loops in turn)."""
        connection = self._connection
        if connection is None or not connection.usable:
            return None
        return connection if connection.loop is asyncio.get_running_loop() else None

    async def _connected(self) -> _Connection:
        if self._closed:
            raise ConnectionError("the rate limiter is closed")
        loop = asyncio.get_running_loop()
        opening = self._opening
        if opening is None or opening.get_loop() is not loop:
            opening = self._opening = loop.create_task(self._open(loop))
        # Shielded: a check cancelled meanwhile (its client went away) does not cancel the
        # opening that other checks wait for.
        return await asyncio.shield(opening)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        endpoint = self._endpoint
        try:
            async with asyncio.timeout(self._connect_timeout):
                if endpoint.path is not None:
                    _, connection = await loop.create_unix_connection(
                        lambda: _Connection(loop), endpoint.path
                    )
                else:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(loop), endpoint.host, endpoint.port, ssl=endpoint.tls
                    )
            try:
                await asyncio.gather(
                    *(
                        connection.request(command, self._connect_timeout)
                        for command in endpoint.setup
                    )
                )
            except BaseException:
                connection.close()
                raise
            self._connection = connection
            return connection
        finally:
            if self._opening is asyncio.current_task():
                self._opening = None

    async def close(self) -> None:
        self._closed = True
        if self._opening is not None:
            self._opening.cancel()
        connection, self._connection = self._connection, None
        if connection is not None and connection.loop is asyncio.get_running_loop():
            connection.close()
            await connection.wait_closed()
