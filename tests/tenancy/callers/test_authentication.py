"""401 without telling why, 403 for another department, and revocation, reset and expiry that
take effect now, also for a key the server has cached."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, update

from dealbase.ops import admin
from dealbase.tenancy.callers.authentication import Authenticator
from dealbase.tenancy.database.connections import Database
from dealbase.tenancy.database.control_tables import api_keys
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"


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


# A bound of one second on a change reaching a running server.
@pytest.mark.serial
def test_revoked_key_is_refused_by_the_running_server_at_once(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    assert post(client, world.key.headers)[0] == 201  # now cached by the server

    admin.revoke_key(database, world.key.key_id)
    refused_at = _first_refusal(client, world.key.headers, within_seconds=1.0)

    assert refused_at is not None, "revoked key still accepted 1 s after revocation"


def test_rotation_with_grace_keeps_the_old_secret_for_the_grace_period_only(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    old = world.key.headers
    assert post(client, old)[0] == 201

    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=2)
    new = {**old, "X-Api-Key": rotated.api_key}

    assert post(client, old)[0] == 201
    assert post(client, new)[0] == 201
    time.sleep(2.1)
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
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    issued = admin.issue_key(
        database,
        world.tenant.id,
        world.department.id,
        "short-lived",
        expires_in=timedelta(seconds=1.5),
    )
    headers = {**world.key.headers, "X-Api-Key": issued.api_key}
    (expires_at,) = (
        k.expires_at
        for k in admin.list_keys(database, world.tenant.id)
        if k.key_id == issued.key_id
    )
    assert expires_at is not None
    assert post(client, headers)[0] == 201
    authenticator: Authenticator = client.app.state.authenticator  # type: ignore[attr-defined]
    assert authenticator.cache.get(issued.key_id) is not None, "the server caches the key"

    time.sleep(max(0.0, (expires_at - datetime.now(UTC)).total_seconds()) + 0.05)
    assert authenticator.cache.get(issued.key_id) is not None, "nothing told the cache"
    status, problem = post(client, headers)

    unknown = {**world.key.headers, "X-Api-Key": f"dbk_{uuid.uuid4().hex}_{'A' * 43}"}
    assert status == 401
    assert without_request_id(problem) == without_request_id(post(client, unknown)[1])
    assert post(client, world.key.headers)[0] == 201


# A bound of one second on a change reaching a running server.
@pytest.mark.serial
def test_reset_refuses_the_old_and_a_grace_period_secret_on_a_running_server(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    first = world.key.headers
    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=3600)
    second = {**first, "X-Api-Key": rotated.api_key}
    assert (post(client, first)[0], post(client, second)[0]) == (201, 201)  # both cached

    reset = admin.reset_key(database, world.key.key_id)

    assert _first_refusal(client, first, within_seconds=1.0) is not None
    assert post(client, second)[0] == 401
    assert post(client, {**first, "X-Api-Key": reset.api_key})[0] == 201


def _first_refusal(
    client: TestClient, headers: dict[str, str], within_seconds: float
) -> float | None:
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < within_seconds:
        if post(client, headers)[0] == 401:
            return elapsed
        time.sleep(0.02)
    return None


@pytest.mark.parametrize(("header", "status"), [("X-Api-Key", 401), ("X-Department-Id", 403)])
def test_very_long_credential_headers_are_refused_cleanly(
    client: TestClient, world: TenantWorld, header: str, status: int
) -> None:
    assert post(client, {**world.key.headers, header: "x" * 8000})[0] == status


def _wait_until_uncached(authenticator: Authenticator, key_id: uuid.UUID) -> None:
    """Returns once the server's listener has dropped the key (PostgreSQL's notice arrived)."""
    deadline = time.monotonic() + 1.0
    while authenticator.cache.get(key_id) is not None:
        assert time.monotonic() < deadline, "the key stayed cached 1 s after the change"
        time.sleep(0.01)


def test_a_suspended_tenants_key_is_refused_403_even_when_cached_and_accepted_once_resumed(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    authenticator: Authenticator = client.app.state.authenticator  # type: ignore[attr-defined]
    assert post(client, world.key.headers)[0] == 201
    assert authenticator.cache.get(world.key.key_id) is not None, "the server caches the key"

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
    authenticator: Authenticator = client.app.state.authenticator  # type: ignore[attr-defined]
    _wait_until_uncached(authenticator, world.key.key_id)
    status, problem = post(client, world.key.headers)

    unknown = {**world.key.headers, "X-Api-Key": f"dbk_{uuid.uuid4().hex}_{'A' * 43}"}
    assert status == 401
    assert without_request_id(problem) == without_request_id(post(client, unknown)[1])
