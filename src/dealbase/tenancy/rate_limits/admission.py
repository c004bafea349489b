"""Admitting an authenticated request under its key's and its tenant's rate limits, and what
every limit of a request does when the shared limiter cannot answer (``LimiterFaults``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

import structlog

from dealbase.errors import RateLimited, Unavailable
from dealbase.tenancy.rate_limits.limiter import (
    Check,
    RateLimiter,
    RateLimiterUnavailable,
    Verdict,
)
from dealbase.tenancy.scope import Rate, Scope

log = structlog.get_logger(__name__)

# Where the edges keep a request's verdict (request.state), for the response's headers.
VERDICT_STATE = "rate_limit"
# A Redis outage is logged once per this many seconds, not once per request.
WARN_EVERY_SECONDS = 30.0
# The verdict of a request served without its limits checked (the limiter failed, open).
UNCHECKED = Verdict(True, ())


class LimiterFaults:
    """What a request does when the shared limiter cannot answer: it is counted, logged (at most
    once per WARN_EVERY_SECONDS), and served (fail open) or refused with 503 (fail closed). One
    per app, for every limit the app asks."""

    def __init__(self, *, fail_closed: bool, on_fault: Callable[[], None] = lambda: None) -> None:
        self._fail_closed = fail_closed
        self._on_fault = on_fault
        self._last_warning = float("-inf")

    def record(self, exc: RateLimiterUnavailable) -> None:
        """Counts and logs the fault, without refusing anything."""
        self._on_fault()
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_SECONDS:
            self._last_warning = now
            log.warning(
                "rate_limiter_unavailable",
                error=str(exc).splitlines()[0] if str(exc) else type(exc.__cause__).__name__,
                failing="closed" if self._fail_closed else "open",
            )

    def fail(self, exc: RateLimiterUnavailable) -> None:
        """Records the fault; raises Unavailable (503) when the service fails closed."""
        self.record(exc)
        if self._fail_closed:
            raise Unavailable("Rate limits cannot be checked right now; retry shortly.") from None


@dataclass(eq=False)
class Admission:
    limiter: RateLimiter
    _: KW_ONLY
    key_rate: Rate
    tenant_rate: Rate
    faults: LimiterFaults
    on_refused: Callable[[], None] = lambda: None

    def rates_of(self, scope: Scope) -> tuple[Rate, Rate]:
        return scope.key_rate or self.key_rate, self.tenant_rate

    async def admit(
        self, scope: Scope, record: Callable[[Verdict], None], *, limiter_answers: bool = True
    ) -> None:
        """Hands the verdict to ``record`` (for the response's headers), then raises RateLimited
        (429) when a limit refuses the request. ``limiter_answers`` False: the limiter failed
        this request already (and it was served, failing open), so it is not asked again — the
        request would wait out its timeout twice, and count as two faults."""
        if not limiter_answers:
            record(UNCHECKED)
            return
        await self._check(scope, record, cost=1, prepaid=0)

    async def charge(self, scope: Scope, cost: int, record: Callable[[Verdict], None]) -> None:
        """Spends the rest of an admitted request's ``cost`` units (at most each limit's burst),
        once it is known: ``admit`` spent the first. Hands the verdict to ``record`` and raises
        RateLimited (429) when a limit refuses, the first unit staying spent; a limiter that
        cannot answer is handled as in ``admit``."""
        await self._check(scope, record, cost=cost, prepaid=1)

    async def _check(
        self, scope: Scope, record: Callable[[Verdict], None], *, cost: int, prepaid: int
    ) -> None:
        assert scope.key_id is not None, "only API key callers are admitted"
        key_rate, tenant_rate = self.rates_of(scope)
        try:
            verdict = await self.limiter.check(
                Check(scope.key_id, key_rate, scope.tenant_id, tenant_rate, cost, prepaid)
            )
        except RateLimiterUnavailable as exc:
            # Recorded before failing, served or refused alike: the verdict of an earlier check
            # of the request (the admission a charge follows) would give it stale headers.
            record(UNCHECKED)
            self.faults.fail(exc)
            return
        record(verdict)
        if not verdict.allowed:
            self.on_refused()
            raise RateLimited(
                "The rate limit is exceeded; retry after the Retry-After seconds.",
                retry_after_seconds=verdict.retry_after_seconds,
            )
