"""Requests of a key far from its limits, admitted by the server process without asking Redis.

Asking Redis for every request is a round trip, a turn of the event loop and Redis's own work:
a share of the CPU the cheapest requests cost the machine that they should not pay. A key that
is far from both of its limits gains nothing from being asked about one request at a time, so
the process answers it itself, from what Redis last said of the key's and its tenant's buckets,
and counts what it admitted as owed. The next check it does send for the key carries the owed
units, which Redis spends first, before that check's own verdict (``RedisLimiter.check``).

A key is admitted here only while both of its buckets had at least ``LOCAL_MIN_REMAINING``
units left when Redis last answered, and each process admits at most a ``LOCAL_SHARE``-th of
what was left before asking again. A busy key is asked again every ``REFRESH_SECONDS`` in the
background: the request that finds Redis's figures that old is admitted like the others and
starts a check of nothing (``cost=0``) carrying the owed units, which no request waits for. A
refresh Redis does not answer is logged, and none is started again for the key until Redis
answers one of its checks. Once Redis's figures are ``STALE_SECONDS`` old nothing is admitted
here: requests wait for Redis (and meet its faults) until it answers again, as do those near a
limit or of a key whose burst is smaller, checks of a cost other than 1 or with units prepaid
(the rest of a batch's cost), and a key's first request. So the units are always spent and the
long-run rate holds exactly; a burst spread over several processes at once can pass a limit by
what each admitted on a figure that did not yet hold the others' owed units (at most a
``LOCAL_SHARE``-th of what it heard was left): the bucket then owes them, and refuses until they
are paid back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from dealbase.tenancy.rate_limits.limiter import (
    Bucket,
    Check,
    RateLimiterUnavailable,
    RedisLimiter,
    Verdict,
)
from dealbase.tenancy.scope import Rate

log = structlog.get_logger(__name__)

LOCAL_MIN_REMAINING = 100
LOCAL_SHARE = 4
REFRESH_SECONDS = 0.02
# Many times REFRESH_SECONDS: a refresh's answer waits its turn in an event loop that a busy
# machine runs late, and a bound any closer makes a busy key's requests wait for Redis in turn.
# The units admitted meanwhile stay bounded by LOCAL_SHARE, not by time.
STALE_SECONDS = 0.5
# Keys remembered at most; past it, those owing nothing are forgotten.
MAX_REMEMBERED = 4096


@dataclass(slots=True)
class _Heard:
    """One bucket as Redis last described it, and the units this process admitted since and
    has not yet seen Redis spend."""

    rate: Rate
    remaining: int
    until_full_seconds: float
    at: float
    owed: int = 0

    def admits(self, rate: Rate) -> bool:
        # The same Rate object request after request (the key's cached one, or the settings'):
        # compared by identity first, without the dataclass's __eq__.
        return (
            (rate is self.rate or rate == self.rate)
            and self.remaining >= LOCAL_MIN_REMAINING
            and self.owed < self.remaining // LOCAL_SHARE
        )

    def hear(self, bucket: Bucket, now: float, paid: int) -> None:
        self.rate = bucket.rate
        self.remaining = bucket.remaining
        self.until_full_seconds = bucket.reset_seconds
        self.at = now
        self.owed = max(self.owed - paid, 0)

    def bucket(self, policy: str, now: float) -> Bucket:
        until_full = max(self.until_full_seconds - (now - self.at), 0.0)
        return Bucket(
            policy,
            self.rate,
            max(self.remaining - self.owed, 0),
            until_full + self.owed * self.rate.interval_ms / 1000,
            0.0,
        )


@dataclass(slots=True)
class _Key:
    heard: _Heard
    tenant_id: uuid.UUID
    tenant: _Heard
    # Checks of the key on their way to Redis, and the owed units they carry.
    asking: int = 0
    carried: int = 0
    # A refresh in the background got no answer, and no check of the key has had one since.
    unanswered: bool = False

    def setting_off(self) -> int:
        """Counts a check of the key as on its way, carrying the units owed that no other check
        on its way carries; returns them. The check's end counts it back (``_ask``)."""
        carry = self.heard.owed - self.carried
        self.asking += 1
        self.carried += carry
        return carry


class LocalAdmissions:
    """A ``RateLimiter`` over a ``RedisLimiter``: keys far from their limits are admitted by the
    process, the rest checked in Redis (the module's docstring says when, and what it costs)."""

    def __init__(
        self, shared: RedisLimiter, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.shared = shared
        self._clock = clock
        self._keys: dict[uuid.UUID, _Key] = {}
        self._tenants: dict[uuid.UUID, _Heard] = {}
        # The refreshes under way, held: the event loop keeps only weak references to tasks.
        self._refreshes: set[asyncio.Task[None]] = set()

    async def check(self, check: Check) -> Verdict:
        now = self._clock()
        key = self._keys.get(check.key_id)
        if key is None:
            return await self._first_check(check)
        heard, tenant = key.heard, key.tenant
        if (
            check.cost == 1
            and check.prepaid == 0
            and heard.admits(check.key_rate)
            and tenant.admits(check.tenant_rate)
        ):
            age = now - min(heard.at, tenant.at)
            if age < STALE_SECONDS:
                heard.owed += 1
                tenant.owed += 1
                verdict = Verdict(True, (heard.bucket("key", now), tenant.bucket("tenant", now)))
                if age >= REFRESH_SECONDS and not key.asking and not key.unanswered:
                    self._refresh(check, key)
                return verdict
        carry = key.setting_off()
        return await self._ask(check, key, carry)

    async def _ask(self, check: Check, key: _Key, carry: int) -> Verdict:
        """Redis's verdict on a check set off (``_Key.setting_off``) with ``carry`` owed units;
        what it says of the buckets is heard."""
        try:
            verdict = await self.shared.check(check, owed=carry)
        finally:
            key.asking -= 1
            key.carried -= carry
        now = self._clock()
        key_bucket, tenant_bucket = verdict.buckets
        key.heard.hear(key_bucket, now, carry)
        key.tenant.hear(tenant_bucket, now, carry)
        key.unanswered = False
        return verdict

    def _refresh(self, check: Check, key: _Key) -> None:
        """Starts a check of nothing in the background that carries the owed units and
        refreshes what the process knows of the key's buckets. It is on its way from now on:
        the requests admitted before its task runs start no other."""
        carry = key.setting_off()
        ask = functools.partial(self._ask, dataclasses.replace(check, cost=0), key, carry)
        task = asyncio.get_running_loop().create_task(_refreshing(key, ask, carry))
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def refreshed(self) -> None:
        """Returns once every refresh under way has its answer, or has failed."""
        while self._refreshes:
            await asyncio.wait(list(self._refreshes))

    async def _first_check(self, check: Check) -> Verdict:
        verdict = await self.shared.check(check)
        key_id, tenant_id = check.key_id, check.tenant_id
        now = self._clock()
        key_bucket, tenant_bucket = verdict.buckets
        if key_id not in self._keys and len(self._keys) >= MAX_REMEMBERED:
            # Before the tenant is looked up: its keys share one record of it.
            self._forget_idle()
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = self._tenants[tenant_id] = _state(tenant_bucket, now)
        else:
            tenant.hear(tenant_bucket, now, 0)
        if key_id not in self._keys:
            self._keys[key_id] = _Key(_state(key_bucket, now), tenant_id, tenant)
        return verdict

    def _forget_idle(self) -> None:
        self._keys = {k: key for k, key in self._keys.items() if key.heard.owed or key.asking}
        kept = {key.tenant_id for key in self._keys.values()}
        self._tenants = {t: tenant for t, tenant in self._tenants.items() if t in kept}

    async def close(self) -> None:
        """Waits for the refreshes under way, spends in Redis what this process admitted and
        Redis has not yet spent, then closes."""
        await self.refreshed()
        for key_id, key in list(self._keys.items()):
            owed = key.heard.owed - key.carried
            if owed <= 0:
                continue
            try:
                await self.shared.check(
                    Check(key_id, key.heard.rate, key.tenant_id, key.tenant.rate, cost=0),
                    owed=owed,
                )
            except RateLimiterUnavailable as exc:
                log.warning("rate_limit_owed_units_lost", units=owed, error=str(exc))
        self._keys.clear()
        self._tenants.clear()
        await self.shared.close()


def _state(bucket: Bucket, now: float) -> _Heard:
    return _Heard(bucket.rate, bucket.remaining, bucket.reset_seconds, now)


async def _refreshing(key: _Key, ask: Callable[[], Awaitable[Verdict]], carry: int) -> None:
    """Runs a refresh's check (``LocalAdmissions._refresh``), which carries ``carry`` owed
    units, and logs its failure."""
    try:
        await ask()
    except RateLimiterUnavailable as exc:
        # The units stay owed, for the next check; requests wait for Redis once what it
        # said is STALE_SECONDS old, and their policy meets the fault.
        key.unanswered = True
        log.warning("rate_limit_refresh_failed", units=carry, error=str(exc))
