"""Failed authentications per client address: a flood of bad keys from one address is refused
429 before its keys are parsed or looked up, so a key cannot be guessed at line rate and the
flood costs the database nothing.

Each address has an allowance (a GCRA bucket in the shared limiter): every failed
authentication spends one failure, and an address whose allowance is spent is refused until it
has room for one more failure, with a good key too — the address is being used to guess, and a
good key from it would be one more guess the limit is there to slow. Requests that authenticate
spend nothing, so an address that sends only good keys is never refused, and an address's
failures never touch another's allowance.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from dealbase.errors import RateLimited
from dealbase.tenancy.admission import LimiterFaults
from dealbase.tenancy.rate_limits import FailureLimiter, RateLimiterUnavailable, retry_after
from dealbase.tenancy.scope import Rate

# One host on IPv6 is usually given a whole /64: it could rotate through its addresses.
IPV6_HOST_PREFIX = 64


def client_address(host: str | None) -> str | None:
    """The address a request's failures count against: its IPv4 address (also when written as
    an IPv4-mapped IPv6 address), or the /64 of its IPv6 address. A host that is not an IP
    address (a test client's name) is used as it is; None when the server knows none."""
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_HOST_PREFIX), strict=False))
    return str(address)


class FailureAllowance:
    def __init__(
        self,
        limiter: FailureLimiter,
        *,
        rate: Rate,
        faults: LimiterFaults,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._limiter = limiter
        self.rate = rate
        self._faults = faults
        self._on_refused = on_refused

    async def admit(self, address: str | None) -> bool:
        """Raises RateLimited (429) when ``address`` has spent its allowance. Returns False when
        the limiter could not answer and the request is served anyway (failing open; failing
        closed raises Unavailable): the request's other limits need not be asked again."""
        if address is None:
            return True
        try:
            wait_seconds = await self._limiter.failure_wait(address, self.rate)
        except RateLimiterUnavailable as exc:
            self._faults.fail(exc)
            return False
        if wait_seconds > 0:
            self._on_refused()
            raise RateLimited(
                "Too many failed authentications from this address; retry after the Retry-After"
                " seconds.",
                retry_after_seconds=retry_after(wait_seconds),
            )
        return True

    async def spend(self, address: str | None) -> None:
        """Spends one failure of ``address``, whose authentication failed."""
        if address is None:
            return
        try:
            await self._limiter.spend_failure(address, self.rate)
        except RateLimiterUnavailable as exc:
            # Counted and logged, but the request keeps its 401 even when failing closed: it
            # is refused already, and a 503 would tell a guesser nothing truer.
            self._faults.record(exc)
