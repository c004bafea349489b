"""Where a webhook may be sent: an ``https`` URL whose host is a public address.

A webhook is a request the service makes on a client's behalf, so without these rules a client
could make it reach what only the service can reach (its own loopback, the private network, a
cloud metadata address). A URL is checked when an endpoint is created or changed, and the
delivery worker checks the addresses it resolved again at delivery time (``check_addresses``),
because a name may point somewhere else by then.

``AddressPolicy(allow_private=True)`` (``DEALBASE_WEBHOOKS_ALLOW_PRIVATE``, for development and
tests) also admits ``http`` and addresses that are not public.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from pydantic_core import PydanticCustomError

from dealbase.errors import Invalid

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2048
# A name that takes longer to resolve is refused rather than holding the request.
RESOLVE_TIMEOUT_SECONDS = 2.0

_SCHEMES = ("https", "http")
# IPv6 prefixes that carry an IPv4 address, judged by the address they carry: 6to4 (2002::/16,
# Python's ``sixtofour``) and NAT64's well-known prefix (RFC 6052).
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow_private: bool = False


def url_shape(url: str) -> str:
    """The rules a URL meets whatever the policy, as a pydantic after-validator (so they are
    reported with the body's other field errors): ``http`` or ``https``, a host, no user name or
    password, a port in range."""
    parts = _split(url)
    if parts.scheme not in _SCHEMES:
        raise PydanticCustomError("invalid_format", "must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise PydanticCustomError("invalid_format", "must not contain a user name or password")
    if not parts.hostname:
        raise PydanticCustomError("invalid_format", "must name a host")
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when it is read
    except ValueError:
        raise PydanticCustomError("invalid_format", "must have a port from 1 to 65535") from None
    if parts.port == 0:
        raise PydanticCustomError("invalid_format", "must have a port from 1 to 65535")
    return url


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError:  # an unbalanced [ in the host, among others
        raise PydanticCustomError("invalid_format", "must be an https:// URL") from None


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a public unicast address, an IPv6 address that carries an IPv4
    one (mapped, 6to4, NAT64) judged by the address it carries."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.ipv4_mapped or address.sixtofour
        if carried is None and address in _NAT64:
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if carried is not None:
            return is_public(carried)
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_unspecified
    )


def check_addresses(host: str, addresses: Iterable[IPAddress], policy: AddressPolicy) -> None:
    """Refuses the destination unless every address ``host`` resolved to is public (or the
    policy allows private ones): one inward address is enough to be refused, since a client of
    the name may pick any."""
    if policy.allow_private:
        return
    inward = sorted({str(address) for address in addresses if not is_public(address)})
    if inward:
        raise Invalid.of(
            "url",
            "address_not_allowed",
            f"The host {host} resolves to an address that is not public ({', '.join(inward)});"
            " webhooks are sent to public addresses only.",
        )


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, looked up off the event loop (the resolver blocks)
    and given up after ``RESOLVE_TIMEOUT_SECONDS``."""
    loop = asyncio.get_running_loop()
    try:
        found = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM),
            timeout=RESOLVE_TIMEOUT_SECONDS,
        )
    except (OSError, UnicodeError, TimeoutError):
        raise Invalid.of(
            "url", "unresolvable", f"The host {host} does not resolve to an address."
        ) from None
    # sockaddr[0] is the address as text; an IPv6 one may carry a zone (%eth0).
    return [ipaddress.ip_address(str(sockaddr[0]).partition("%")[0]) for *_, sockaddr in found]


async def check_url(url: str, policy: AddressPolicy) -> None:
    """Refuses ``url`` (already of the shape ``url_shape`` admits) unless it is ``https`` to a
    public address, or the policy allows otherwise; a name is resolved and each of its
    addresses judged."""
    parts = urlsplit(url)
    if parts.scheme != "https" and not policy.allow_private:
        raise Invalid.of("url", "invalid_format", "The URL must be an https:// URL.")
    host = parts.hostname or ""
    try:
        literal: IPAddress | None = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        literal = None
    if literal is not None:
        check_addresses(host, [literal], policy)
        return
    if policy.allow_private:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    check_addresses(host, await resolve(host, port), policy)
