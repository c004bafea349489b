"""Where webhooks may be sent: https to public addresses only, unless private ones are allowed."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from dealbase.errors import Invalid
from dealbase.platform.webhooks.addresses import (
    AddressPolicy,
    check_addresses,
    check_url,
    is_public,
)

REFUSE = AddressPolicy()
ALLOW_PRIVATE = AddressPolicy(allow_private=True)

NOT_PUBLIC = [
    "127.0.0.1",  # loopback
    "127.255.255.254",
    "10.1.2.3",  # private
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",  # link-local: cloud metadata
    "100.64.0.1",  # shared address space (carrier-grade NAT)
    "0.0.0.0",  # noqa: S104 -- unspecified
    "224.0.0.1",  # multicast
    "239.255.255.250",
    "240.0.0.1",  # reserved
    "255.255.255.255",  # broadcast
    "192.0.2.1",  # documentation
    "198.18.0.1",  # benchmarking
    "::1",
    "::",
    "fe80::1",
    "fc00::1",  # unique local
    "ff02::1",  # multicast
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.1",
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "2001:db8::1",  # documentation
]
PUBLIC = ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_addresses_that_are_not_public_are_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    with pytest.raises(Invalid) as refused:
        check_addresses("host", [ipaddress.ip_address(address)], REFUSE)
    assert [(e.field, e.code) for e in refused.value.errors] == [("url", "address_not_allowed")]


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_admitted(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))
    check_addresses("host", [ipaddress.ip_address(address)], REFUSE)


def test_one_inward_address_among_public_ones_refuses_the_name() -> None:
    addresses = [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("10.0.0.1")]

    with pytest.raises(Invalid, match=r"10\.0\.0\.1"):
        check_addresses("mixed.example", addresses, REFUSE)


def test_allowing_private_addresses_admits_every_address() -> None:
    check_addresses("host", [ipaddress.ip_address(a) for a in NOT_PUBLIC], ALLOW_PRIVATE)


def refusal(url: str, policy: AddressPolicy = REFUSE) -> tuple[str, str] | None:
    try:
        asyncio.run(check_url(url, policy))
    except Invalid as exc:
        (error,) = exc.errors
        return error.field, error.code
    return None


@pytest.mark.parametrize(
    "url",
    [
        "https://localhost/hook",  # a name that resolves to the loopback
        "https://127.0.0.1/hook",
        "https://[::1]:8443/hook",
        "https://2130706433/hook",  # 127.0.0.1 as one number, read so by the resolver
        "https://0x7f.1/hook",
        "https://169.254.169.254/latest/meta-data",
    ],
)
def test_urls_to_inward_hosts_are_refused(url: str) -> None:
    assert refusal(url) == ("url", "address_not_allowed")


def test_a_name_that_does_not_resolve_is_refused() -> None:
    assert refusal("https://no-such-host.invalid/hook") == ("url", "unresolvable")


def test_http_is_refused_by_default() -> None:
    assert refusal("http://8.8.8.8/hook") == ("url", "invalid_format")


def test_an_https_url_to_a_public_address_is_admitted() -> None:
    assert refusal("https://8.8.8.8:8443/hook") is None


@pytest.mark.parametrize(
    "url", ["http://localhost:9000/hook", "https://127.0.0.1/hook", "http://10.0.0.1/hook"]
)
def test_allowing_private_addresses_admits_http_and_inward_hosts(url: str) -> None:
    assert refusal(url, ALLOW_PRIVATE) is None
