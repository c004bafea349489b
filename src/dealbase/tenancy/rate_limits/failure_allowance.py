"""Failed authentications per client address: a flood of bad keys from one address is refused
429 before its keys are parsed or looked up, so a key cannot be guessed at line rate and the
flood costs the database nothing.

Each address has an allowance (a GCRA bucket in the shared limiter): every failed
authentication spends one failure, and an address whose allowance is spent is refused until it
has room for one more failure, with a good key too — the address is being used to guess, and a
good key from it would be one more guess the limit is there to slow. Requests that authenticate
spend nothing, so an address that sends only good keys is never refused, and an address's
failures never touch another's allowance.

Only addresses this process has seen fail lately are asked about before authentication: a
request from any other address costs no round trip to the limiter, so the limit adds nothing to
the requests of good clients. An address that fails on several processes at once gets one
failure on each before each of them asks first: a handful of guesses more, each still counted.
"""

from __future__ import annotations

import functools
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from dealbase.errors import RateLimited
from dealbase.tenancy.rate_limits.admission import LimiterFaults
from dealbase.tenancy.rate_limits.limiter import FailureLimiter, RateLimiterUnavailable, retry_after
from dealbase.tenancy.scope import Rate

# One host on IPv6 is usually given a whole /64: it could rotate through its addresses.
IPV6_HOST_PREFIX = 64
# Addresses a process remembers having seen fail; the oldest is forgotten first.
MAX_REMEMBERED_ADDRESSES = 100_000


# A server sees few distinct client addresses at a time (its proxies, its integrations): each
# is parsed once rather than on every request.
@functools.lru_cache(maxsize=4096)
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


@dataclass(eq=False)
class FailureAllowance:
    limiter: FailureLimiter
    _: KW_ONLY
    rate: Rate
    faults: LimiterFaults
    on_refused: Callable[[], None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    # Address -> until when (clock) it is asked about before authentication: its allowance
    # may not be full again before then.
    failing: OrderedDict[str, float] = field(default_factory=OrderedDict, init=False)

    async def admit(self, address: str | None) -> bool:
        """Raises RateLimited (429) when ``address`` has spent its allowance. Returns False when
        the limiter could not answer and the request is served anyway (failing open; failing
        closed raises Unavailable): the request's other limits need not be asked again."""
        if address is None or not self._failed_lately(address):
            return True
        try:
            wait_seconds = await self.limiter.failure_wait(address, self.rate)
        except RateLimiterUnavailable as exc:
            self.faults.fail(exc)
            return False
        if wait_seconds > 0:
            self._remember(address, wait_seconds)
            self.on_refused()
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
        self._remember(address, 0.0)
        try:
            await self.limiter.spend_failure(address, self.rate)
        except RateLimiterUnavailable as exc:
            # Counted and logged, but the request keeps its 401 even when failing closed: it
            # is refused already, and a 503 would tell a guesser nothing truer.
            self.faults.record(exc)

    def _failed_lately(self, address: str) -> bool:
        until = self.failing.get(address)
        if until is None:
            return False
        if until <= self.clock():
            del self.failing[address]
            return False
        return True

    def _remember(self, address: str, wait_seconds: float) -> None:
        # A full allowance refills in window_seconds after its last failure; a refused address
        # is asked about at least until its wait is over.
        until = self.clock() + max(self.rate.window_seconds, wait_seconds)
        self.failing[address] = max(until, self.failing.get(address, until))
        self.failing.move_to_end(address)
        if len(self.failing) > MAX_REMEMBERED_ADDRESSES:
            self.failing.popitem(last=False)
