"""``dealbase serve`` counts failed authentications against the client address uvicorn reports:
X-Forwarded-For names it only when the peer is one of FORWARDED_ALLOW_IPS (uvicorn's default
trusts the loopback), and from any other peer a client cannot choose its address by the header.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support import TenantWorld, dealbase_served

CUSTOMERS = "/api/v1/integration/customers"


@contextmanager
def _serve(database_url: str, directory: Path, extra_env: dict[str, str]) -> Iterator[str]:
    """One worker (its in-process limiter counts every request), three failures per address."""
    settings = {
        "DEALBASE_RATE_LIMIT_AUTH_FAILURES": "0.1/s",
        "DEALBASE_RATE_LIMIT_AUTH_FAILURES_BURST": "3",
        **extra_env,
    }
    with dealbase_served(directory, database_url, settings) as server:
        yield server.base_url


def _statuses(base_url: str, world: TenantWorld, forwarded_for: list[str]) -> list[int]:
    """A bad key from each X-Forwarded-For in turn, then a good key from the last one."""
    guess = {"X-Api-Key": f"dbk_{uuid.uuid4().hex}_{'A' * 43}"}
    with httpx.Client(base_url=base_url, timeout=10) as http:
        statuses = [
            http.get(CUSTOMERS, headers={**guess, "X-Forwarded-For": address}).status_code
            for address in forwarded_for
        ]
        good = http.get(
            CUSTOMERS, headers={**world.key.headers, "X-Forwarded-For": forwarded_for[-1]}
        )
    return [*statuses, good.status_code]


def test_x_forwarded_for_names_the_client_of_a_trusted_proxy(
    database_url: str, world: TenantWorld, tmp_path: Path
) -> None:
    # Unset FORWARDED_ALLOW_IPS: uvicorn trusts 127.0.0.1, this test's peer.
    with _serve(database_url, tmp_path, {}) as base_url:
        statuses = _statuses(base_url, world, [f"192.0.2.{n}" for n in range(1, 7)])

    assert statuses == [401] * 6 + [200]


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(
    database_url: str, world: TenantWorld, tmp_path: Path
) -> None:
    with _serve(database_url, tmp_path, {"FORWARDED_ALLOW_IPS": "192.0.2.1"}) as base_url:
        statuses = _statuses(base_url, world, [f"192.0.2.{n}" for n in range(1, 7)])

    # Every request is the peer's, 127.0.0.1: three failures, then refused, a good key too.
    assert statuses == [401] * 3 + [429] * 4
