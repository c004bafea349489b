"""Admitting an authenticated request under its key's and its tenant's rate limits."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from dealbase.errors import RateLimited, Unavailable
from dealbase.tenancy.rate_limits import RateLimiter, RateLimiterUnavailable, Verdict
from dealbase.tenancy.scope import Rate, Scope

log = structlog.get_logger(__name__)

# Where the edges keep a request's verdict (request.state), for the response's headers.
VERDICT_STATE = "rate_limit"
# A Redis outage is logged once per this many seconds, not once per request.
WARN_EVERY_SECONDS = 30.0


class Admission:
    def __init__(
        self,
        limiter: RateLimiter,
        *,
        key_rate: Rate,
        tenant_rate: Rate,
        fail_closed: bool,
        on_limiter_fault: Callable[[], None] = lambda: None,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._limiter = limiter
        self.key_rate = key_rate
        self.tenant_rate = tenant_rate
        self._fail_closed = fail_closed
        self._on_fault = on_limiter_fault
        self._on_refused = on_refused
        self._last_warning = float("-inf")

    def rates_of(self, scope: Scope) -> tuple[Rate, Rate]:
        return scope.key_rate or self.key_rate, self.tenant_rate

    async def admit(self, scope: Scope, record: Callable[[Verdict], None]) -> None:
        """Hands the verdict to ``record`` (for the response's headers), then raises RateLimited
        (429) when a limit refuses the request."""
        assert scope.key_id is not None, "only API key callers are admitted"
        key_rate, tenant_rate = self.rates_of(scope)
        try:
            verdict = await self._limiter.check(
                scope.key_id, key_rate, scope.tenant_id, tenant_rate
            )
        except RateLimiterUnavailable as exc:
            self._on_fault()
            now = time.monotonic()
            if now - self._last_warning >= WARN_EVERY_SECONDS:
                self._last_warning = now
                log.warning(
                    "rate_limiter_unavailable",
                    error=str(exc).splitlines()[0] if str(exc) else type(exc.__cause__).__name__,
                    failing="closed" if self._fail_closed else "open",
                )
            if self._fail_closed:
                raise Unavailable(
                    "Rate limits cannot be checked right now; retry shortly."
                ) from None
            verdict = Verdict(True, ())
        record(verdict)
        if not verdict.allowed:
            self._on_refused()
            raise RateLimited(
                "The rate limit is exceeded; retry after the Retry-After seconds.",
                retry_after_seconds=verdict.retry_after_seconds,
            )
