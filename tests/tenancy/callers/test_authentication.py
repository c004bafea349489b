"""401 without telling why, 403 for another department, and revocation, reset and expiry that
take effect now, also for a key the server has cached.

The server judges expiries and grace periods on its authenticator's clock (``now``): the tests
that cross one set that clock to the moment they mean instead of waiting for it."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, update

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.tenancy.callers.api_keys import KeyInfo
from dealbase.tenancy.callers.authentication import Authenticator
from dealbase.tenancy.control_tables import api_keys
from tests.support import TenantWorld, wait_until

CUSTOMERS = "/api/v1/integration/customers"


class WallClock:
    """A UTC clock that stands still until the test sets it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def on_the_tests_clock(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, now: datetime
) -> WallClock:
    """The running server's authenticator judges expiries on a clock the test sets, from
    ``now`` on, until the test ends."""
    clock = WallClock(now)
    monkeypatch.setattr(authenticator_of(client), "now", clock)
    return clock


def authenticator_of(client: TestClient) -> Authenticator:
    authenticator: Authenticator = client.app.state.authenticator  # type: ignore[attr-defined]
    return authenticator


def key_info(database: Database, world: TenantWorld, key_id: uuid.UUID) -> KeyInfo:
    (info,) = (k for k in admin.list_keys(database, world.tenant.id) if k.key_id == key_id)
    return info


def post(client: TestClient, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    response = client.post(CUSTOMERS, json={"last_name": "x"}, headers=headers)
    return response.status_code, response.json()


def without_request_id(problem: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in problem.items() if key != "request_id"}


def test_every_credential_problem_gets_one_identical_401(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    key = world.key
    department = str(key.department_id)
    revoked = admin.issue_key(database, world.tenant.id, key.department_id, "to revoke")
    admin.revoke_key(database, revoked.key_id)
    rotated = admin.issue_key(database, world.tenant.id, key.department_id, "to rotate")
    admin.rotate_key(database, rotated.key_id, grace_seconds=0)
    reset = admin.issue_key(database, world.tenant.id, key.department_id, "to reset")
    admin.reset_key(database, reset.key_id)
    expired = admin.issue_key(database, world.tenant.id, key.department_id, "expired")
    with database.control() as connection:
        connection.execute(
            update(api_keys)
            .where(api_keys.c.id == expired.key_id)
            .values(expires_at=func.now() - timedelta(seconds=1))
        )
    unknown_key = f"dbk_{uuid.uuid4().hex}_{'A' * 43}"
    wrong_secret = key.api_key[:-1] + ("B" if key.api_key[-1] != "B" else "C")

    cases = {
        "no headers": {},
        "no key": {"X-Department-Id": department},
        "no department": {"X-Api-Key": key.api_key},
        "malformed key": {"X-Api-Key": "hello", "X-Department-Id": department},
        "unknown key": {"X-Api-Key": unknown_key, "X-Department-Id": department},
        "wrong secret": {"X-Api-Key": wrong_secret, "X-Department-Id": department},
        "revoked key": {"X-Api-Key": revoked.api_key, "X-Department-Id": department},
        "rotated-out secret": {"X-Api-Key": rotated.api_key, "X-Department-Id": department},
        "secret before a reset": {"X-Api-Key": reset.api_key, "X-Department-Id": department},
        "expired key": {"X-Api-Key": expired.api_key, "X-Department-Id": department},
    }
    answers = {name: post(client, headers) for name, headers in cases.items()}

    assert {name: status for name, (status, _) in answers.items()} == dict.fromkeys(cases, 401)
    bodies = {str(without_request_id(body)) for _, body in answers.values()}
    assert len(bodies) == 1


def test_valid_key_with_another_or_malformed_department_is_403(
    client: TestClient, world: TenantWorld
) -> None:
    for department in (str(uuid.uuid4()), "not-a-uuid"):
        status, problem = post(
            client, {"X-Api-Key": world.key.api_key, "X-Department-Id": department}
        )
        assert (status, problem["code"]) == (403, "forbidden")


def test_revoked_key_is_refused_by_the_running_server_that_cached_it(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    authenticator = _with_the_key_cached(client, world)

    admin.revoke_key(database, world.key.key_id)
    _wait_until_uncached(authenticator, world.key.key_id)

    assert post(client, world.key.headers)[0] == 401


def test_rotation_with_grace_keeps_the_old_secret_for_the_grace_period_only(
    client: TestClient, world: TenantWorld, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = world.key.headers
    assert post(client, old)[0] == 201

    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=2)
    new = {**old, "X-Api-Key": rotated.api_key}
    # The secrets the server cached before the rotation go once it hears of it.
    _wait_until_uncached(authenticator_of(client), world.key.key_id)
    # The grace ends 2 s after the rotation, by the database's clock that wrote both.
    rotated_at = key_info(database, world, world.key.key_id).rotated_at
    assert rotated_at is not None
    clock = on_the_tests_clock(client, monkeypatch, rotated_at)

    assert post(client, old)[0] == 201
    assert post(client, new)[0] == 201
    clock.now = rotated_at + timedelta(seconds=2) - timedelta(microseconds=1)
    assert post(client, old)[0] == 201
    clock.now = rotated_at + timedelta(seconds=2)
    assert post(client, old)[0] == 401
    assert post(client, new)[0] == 201


def test_rotating_twice_ends_the_grace_of_the_first_secret(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    first = world.key.headers
    admin.rotate_key(database, world.key.key_id, grace_seconds=60)
    third = admin.rotate_key(database, world.key.key_id, grace_seconds=60)

    assert post(client, first)[0] == 401
    assert post(client, {**first, "X-Api-Key": third.api_key})[0] == 201


def test_cached_key_is_refused_once_it_expires_with_the_same_401(
    client: TestClient, world: TenantWorld, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued = admin.issue_key(
        database,
        world.tenant.id,
        world.department.id,
        "short-lived",
        expires_in=timedelta(seconds=1.5),
    )
    headers = {**world.key.headers, "X-Api-Key": issued.api_key}
    info = key_info(database, world, issued.key_id)
    assert info.expires_at is not None
    clock = on_the_tests_clock(client, monkeypatch, info.created_at)
    assert post(client, headers)[0] == 201
    authenticator = authenticator_of(client)
    assert authenticator.cache.get(issued.key_id) is not None, "the server caches the key"
    clock.now = info.expires_at - timedelta(microseconds=1)
    assert post(client, headers)[0] == 201

    clock.now = info.expires_at
    assert authenticator.cache.get(issued.key_id) is not None, "nothing told the cache"
    status, problem = post(client, headers)

    unknown = {**world.key.headers, "X-Api-Key": f"dbk_{uuid.uuid4().hex}_{'A' * 43}"}
    assert status == 401
    assert without_request_id(problem) == without_request_id(post(client, unknown)[1])
    assert post(client, world.key.headers)[0] == 201


def test_reset_refuses_the_old_and_a_grace_period_secret_on_a_running_server(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    first = world.key.headers
    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=3600)
    second = {**first, "X-Api-Key": rotated.api_key}
    assert (post(client, first)[0], post(client, second)[0]) == (201, 201)  # both cached
    authenticator = authenticator_of(client)
    assert authenticator.cache.get(world.key.key_id) is not None

    reset = admin.reset_key(database, world.key.key_id)
    _wait_until_uncached(authenticator, world.key.key_id)

    assert post(client, first)[0] == 401
    assert post(client, second)[0] == 401
    assert post(client, {**first, "X-Api-Key": reset.api_key})[0] == 201


@pytest.mark.parametrize(("header", "status"), [("X-Api-Key", 401), ("X-Department-Id", 403)])
def test_very_long_credential_headers_are_refused_cleanly(
    client: TestClient, world: TenantWorld, header: str, status: int
) -> None:
    assert post(client, {**world.key.headers, header: "x" * 8000})[0] == status


def _with_the_key_cached(client: TestClient, world: TenantWorld) -> Authenticator:
    """The server's authenticator, once a request of ``world``'s key has made it cache the key."""
    authenticator = authenticator_of(client)
    assert post(client, world.key.headers)[0] == 201
    assert authenticator.cache.get(world.key.key_id) is not None, "the server caches the key"
    return authenticator


def _wait_until_uncached(authenticator: Authenticator, key_id: uuid.UUID) -> None:
    """Returns once the server's listener has dropped the key (PostgreSQL's notice arrived)."""
    wait_until(lambda: authenticator.cache.get(key_id) is None, "the key's drop from the cache")


def test_a_suspended_tenants_key_is_refused_403_even_when_cached_and_accepted_once_resumed(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    authenticator = _with_the_key_cached(client, world)

    admin.suspend_tenant(database, world.tenant.id, "test")
    _wait_until_uncached(authenticator, world.key.key_id)
    status, problem = post(client, world.key.headers)

    assert (status, problem["code"], problem["title"]) == (
        403,
        "tenant_suspended",
        "Tenant suspended",
    )
    assert "suspended" in str(problem["detail"])
    assert post(client, world.key.headers)[0] == 403, "cached as suspended, still refused"

    admin.resume_tenant(database, world.tenant.id)
    _wait_until_uncached(authenticator, world.key.key_id)

    assert post(client, world.key.headers)[0] == 201


def test_a_suspended_tenants_key_with_a_wrong_secret_or_department_learns_nothing_of_it(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    admin.suspend_tenant(database, world.tenant.id, None)
    wrong_secret = world.key.api_key[:-1] + ("B" if world.key.api_key[-1] != "B" else "C")

    status, problem = post(client, {**world.key.headers, "X-Api-Key": wrong_secret})

    assert (status, problem["code"]) == (401, "unauthenticated")


def test_a_deleted_tenants_keys_get_the_same_401_as_an_unknown_key(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    assert post(client, world.key.headers)[0] == 201

    admin.delete_tenant(database, world.tenant.id)
    authenticator = authenticator_of(client)
    _wait_until_uncached(authenticator, world.key.key_id)
    status, problem = post(client, world.key.headers)

    unknown = {**world.key.headers, "X-Api-Key": f"dbk_{uuid.uuid4().hex}_{'A' * 43}"}
    assert status == 401
    assert without_request_id(problem) == without_request_id(post(client, unknown)[1])
