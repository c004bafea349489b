"""Sending one delivery: resolve the host, check where it leads, POST the signed body, and say
what came of it in a ``Response``; never an exception."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import ssl
import time
from collections import OrderedDict
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import certifi
import httpx

from dealbase.errors import Invalid
from dealbase.platform.webhooks import signing
from dealbase.platform.webhooks.addresses import (
    AddressPolicy,
    IPAddress,
    check_addresses,
    resolve,
)
from dealbase.platform.webhooks.delivery_models import Outgoing, Response

# A 2xx within this many seconds, resolving the name included, is a success.
TIMEOUT_SECONDS = 10.0
USER_AGENT = "dealbase-webhooks/1"
# Of a response, at most this much is read (and then dropped): enough to keep the connection
# for the next delivery, too little for a receiver to make the worker hold much.
_RESPONSE_BYTES_READ = 64 * 1024
# Any longer Retry-After is as good as this (the retry policy caps it further).
_LONGEST_RETRY_AFTER_SECONDS = 7 * 24 * 3600


def trusted_authorities(ca_bundle: Path | None = None) -> ssl.SSLContext:
    """What a worker trusts for https: the public CAs (certifi's, as httpx has them), those of
    the standard ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, and those of ``ca_bundle``
    (``DEALBASE_WEBHOOKS_CA_BUNDLE``). A file that holds no certificate fails here, at the
    worker's start, with OpenSSL's reason."""
    context = ssl.create_default_context(cafile=certifi.where())
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        context.load_verify_locations(cafile=cafile or None, capath=capath or None)
    if ca_bundle is not None:
        context.load_verify_locations(cafile=str(ca_bundle))
    return context


class Sender:
    """A worker's HTTP clients for its deliveries. The request goes to the address that was
    checked, not to the name (which could resolve elsewhere a moment later), with the name in
    ``Host`` and, for ``https``, in the TLS handshake, where the certificate is checked
    against it.

    A client pools its connections by address, so each host name has its own client: a
    connection whose certificate was checked for one name never carries another name's
    deliveries, though both resolve to one address. The clients of the names used least
    lately are closed beyond ``MAX_CLIENTS`` (more than the default limits ever have in
    flight, so a client is not closed under a request).
    """

    MAX_CLIENTS = 1024

    def __init__(self, policy: AddressPolicy, trusted: ssl.SSLContext | None = None) -> None:
        self.policy = policy
        self.trusted = trusted if trusted is not None else trusted_authorities()
        self._clients: OrderedDict[str, httpx.AsyncClient] = OrderedDict()

    async def close(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.aclose()

    async def _client_for(self, origin: str) -> httpx.AsyncClient:
        client = self._clients.get(origin)
        if client is not None:
            self._clients.move_to_end(origin)
            return client
        # No cap on connections: the worker's own limits (tenants at once, deliveries per
        # step) bound what is in flight, and a request waiting for a pooled connection would
        # spend its 10 seconds waiting.
        client = self._clients[origin] = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            verify=self.trusted,
            timeout=httpx.Timeout(TIMEOUT_SECONDS),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
        )
        if len(self._clients) > self.MAX_CLIENTS:
            _, oldest = self._clients.popitem(last=False)
            await oldest.aclose()
        return client

    async def send(self, delivery: Outgoing, now: datetime) -> Response:
        started = time.perf_counter()

        def answered(
            status: int | None, error: str | None, wait: timedelta | None = None
        ) -> Response:
            elapsed_ms = round((time.perf_counter() - started) * 1000)
            return Response(status, elapsed_ms, error, wait)

        timestamp = int(now.timestamp())
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            **signing.headers(delivery.secrets, delivery.message_id, timestamp, delivery.body),
        }
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                parts = urlsplit(delivery.url)
                address = await self._checked_address(parts)
                status, retry_after = await self._post(parts, address, headers, delivery.body)
        except Invalid as refused:
            return answered(None, refused.detail)
        except TimeoutError:
            return answered(None, f"No answer within {TIMEOUT_SECONDS:g} seconds.")
        except httpx.HTTPError as failed:
            return answered(None, f"The request failed: {type(failed).__name__}: {failed}"[:500])
        if 200 <= status < 300:
            return answered(status, None)
        wait = _retry_after(retry_after, now) if status in (429, 503) else None
        return answered(status, f"The endpoint answered {status}.", wait)

    async def _checked_address(self, parts: SplitResult) -> IPAddress:
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if parts.scheme != "https" and not self.policy.allow_private:
            raise Invalid.of("url", "invalid_format", "The URL is not an https:// URL.")
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(host.partition("%")[0])]
        except ValueError:
            addresses = await resolve(host, port)
        check_addresses(host, addresses, self.policy)
        return addresses[0]

    async def _post(
        self, parts: SplitResult, address: IPAddress, headers: dict[str, str], body: bytes
    ) -> tuple[int, str | None]:
        host = parts.hostname or ""
        literal = f"[{address}]" if address.version == 6 else str(address)
        netloc = literal if parts.port is None else f"{literal}:{parts.port}"
        url = parts._replace(netloc=netloc).geturl()
        # An IPv6 address in a Host header is bracketed, as in the URL.
        named = f"[{host}]" if ":" in host else host
        host_header = named if parts.port is None else f"{named}:{parts.port}"
        client = await self._client_for(f"{parts.scheme}://{host_header}")
        request = client.build_request(
            "POST",
            url,
            content=body,
            headers={**headers, "host": host_header},
            extensions={"sni_hostname": host},
        )
        response = await client.send(request, stream=True)
        try:
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read > _RESPONSE_BYTES_READ:
                    break
        finally:
            await response.aclose()
        return response.status_code, response.headers.get("retry-after")


def _retry_after(value: str | None, now: datetime) -> timedelta | None:
    """``Retry-After`` as a wait: seconds, or an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return timedelta(seconds=min(int(value), _LONGEST_RETRY_AFTER_SECONDS))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(when - now, timedelta(0))
