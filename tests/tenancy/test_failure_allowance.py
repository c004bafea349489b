"""The client address a request's failed authentications count against."""

from __future__ import annotations

import pytest

from dealbase.tenancy.failure_allowance import client_address


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::ffff", "2001:db8:1:2::/64"),
        ("::1", "::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv4_address_counts_alone_and_an_ipv6_address_by_its_64(
    host: str, address: str
) -> None:
    assert client_address(host) == address


@pytest.mark.parametrize("host", [None, ""])
def test_no_address_counts_against_none(host: str | None) -> None:
    assert client_address(host) is None
