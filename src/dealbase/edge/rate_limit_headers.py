"""RateLimit-Policy and RateLimit response headers (the IETF RateLimit header fields draft),
on every response to a request that was admitted or refused under rate limits."""

from __future__ import annotations

import math

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbase.tenancy.admission import VERDICT_STATE
from dealbase.tenancy.rate_limits import Verdict


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


class RateLimitHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                verdict = scope.get("state", {}).get(VERDICT_STATE)
                if isinstance(verdict, Verdict):
                    message["headers"] = [*message.get("headers", []), *rate_limit_headers(verdict)]
            await send(message)

        await self.app(scope, receive, send_with_headers)
