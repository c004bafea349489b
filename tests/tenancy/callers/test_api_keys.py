"""Keys are stored as hashes only, their lifecycle rules hold, and every change is audited."""

from __future__ import annotations

import getpass
import hashlib
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.errors import Conflict, Invalid, NotFound
from dealbase.ops import admin
from dealbase.platform.resources import format_timestamp
from dealbase.tenancy.callers import api_keys as api_keys_module
from dealbase.tenancy.callers.api_keys import (
    MAX_GRACE_SECONDS,
    MAX_KEY_LIFETIME,
    KeyAction,
    load_credentials,
    parse_api_key,
)
from dealbase.tenancy.control_tables import api_key_audit, api_keys
from dealbase.tenancy.scope import Rate
from tests.support import TenantWorld


def test_only_a_hash_of_the_secret_is_stored(database: Database, world: TenantWorld) -> None:
    secret = world.key.api_key.split("_", 2)[2]

    with database.control() as connection:
        row = connection.execute(select(api_keys).where(api_keys.c.id == world.key.key_id)).one()

    stored = " ".join(str(value) for value in row)
    assert secret not in stored and world.key.api_key not in stored
    assert len(row.secret_hash) == 32


def test_key_needs_a_department_of_its_own_tenant(
    database: Database, world: TenantWorld, make_tenant: Callable[..., TenantWorld]
) -> None:
    other = admin.create_department(database, world.tenant.id, "other")
    foreign_department = make_tenant().department.id

    for department in (foreign_department, uuid.uuid4()):
        with pytest.raises(NotFound):
            admin.issue_key(database, world.tenant.id, department, None)
    assert admin.issue_key(database, world.tenant.id, other.id, None).department_id == other.id


def test_revoked_key_cannot_be_rotated(database: Database, world: TenantWorld) -> None:
    admin.revoke_key(database, world.key.key_id)

    with pytest.raises(Conflict):
        admin.rotate_key(database, world.key.key_id, 0)


@pytest.mark.parametrize("grace", [-1, MAX_GRACE_SECONDS + 1])
def test_grace_period_out_of_range_is_invalid(
    database: Database, world: TenantWorld, grace: int
) -> None:
    with pytest.raises(Invalid):
        admin.rotate_key(database, world.key.key_id, grace)


def test_unknown_key_cannot_be_revoked_or_rotated(database: Database) -> None:
    with pytest.raises(NotFound):
        admin.revoke_key(database, uuid.uuid4())
    with pytest.raises(NotFound):
        admin.rotate_key(database, uuid.uuid4(), 0)


def test_key_list_shows_every_key_without_secrets(database: Database, world: TenantWorld) -> None:
    admin.revoke_key(database, world.key.key_id)

    (listed,) = admin.list_keys(database, world.tenant.id)

    assert listed.key_id == world.key.key_id and listed.revoked_at is not None
    assert not hasattr(listed, "api_key")


@pytest.mark.parametrize(
    "lifetime",
    [timedelta(0), timedelta(seconds=-1), MAX_KEY_LIFETIME + timedelta(seconds=1)],
    ids=["zero", "negative", "over-five-years"],
)
def test_key_lifetime_out_of_range_is_invalid(
    database: Database, world: TenantWorld, lifetime: timedelta
) -> None:
    with pytest.raises(Invalid):
        admin.issue_key(database, world.tenant.id, world.department.id, None, expires_in=lifetime)


def test_key_expires_at_the_database_time_plus_its_lifetime(
    database: Database, world: TenantWorld
) -> None:
    with database.control() as connection:
        before = connection.execute(select(func.now())).scalar_one()
    issued = admin.issue_key(
        database, world.tenant.id, world.department.id, None, expires_in=timedelta(days=90)
    )
    with database.control() as connection:
        after = connection.execute(select(func.now())).scalar_one()

    listed = {key.key_id: key for key in admin.list_keys(database, world.tenant.id)}

    expires_at = listed[issued.key_id].expires_at
    assert expires_at is not None
    # Issued between the two readings of the database's clock.
    assert before + timedelta(days=90) <= expires_at <= after + timedelta(days=90)
    assert listed[world.key.key_id].expires_at is None


def test_revoked_key_cannot_be_reset(database: Database, world: TenantWorld) -> None:
    admin.revoke_key(database, world.key.key_id)

    with pytest.raises(Conflict):
        admin.reset_key(database, world.key.key_id)


def test_unknown_key_cannot_be_reset(database: Database) -> None:
    with pytest.raises(NotFound):
        admin.reset_key(database, uuid.uuid4())


def test_reset_refuses_the_old_secret_and_one_still_in_a_grace_period(
    database: Database, world: TenantWorld
) -> None:
    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=3600)

    reset = admin.reset_key(database, world.key.key_id)

    with database.control() as connection:
        credentials = load_credentials(connection, world.key.key_id)
    assert credentials is not None
    now = datetime.now(UTC)
    accepted = {
        name: credentials.accepts(_secret(api_key), now)
        for name, api_key in [
            ("first", world.key.api_key),
            ("rotated", rotated.api_key),
            ("reset", reset.api_key),
        ]
    }
    assert accepted == {"first": False, "rotated": False, "reset": True}
    assert reset.key_id == world.key.key_id


def _secret(api_key: str) -> str:
    parsed = parse_api_key(api_key)
    assert parsed is not None
    return parsed[1]


def test_every_key_change_is_audited_oldest_first_with_its_details(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: "ops-alice")
    issued = admin.issue_key(
        database,
        world.tenant.id,
        world.department.id,
        "zapier",
        Rate(5.0, 10),
        expires_in=timedelta(days=30),
    )
    admin.set_key_rate(database, issued.key_id, Rate(2.5, 4))
    admin.set_key_rate(database, issued.key_id, None)
    admin.rotate_key(database, issued.key_id, grace_seconds=120)
    admin.reset_key(database, issued.key_id)
    admin.revoke_key(database, issued.key_id)

    records = [r for r in admin.key_audit(database, world.tenant.id) if r.key_id == issued.key_id]

    (expires_at,) = (
        k.expires_at
        for k in admin.list_keys(database, world.tenant.id)
        if k.key_id == issued.key_id
    )
    assert expires_at is not None
    assert [(r.action, r.details) for r in records] == [
        (
            KeyAction.issue,
            {
                "name": "zapier",
                "department_id": str(world.department.id),
                "expires_at": format_timestamp(expires_at),
                "rate_per_second": 5.0,
                "rate_burst": 10,
            },
        ),
        (KeyAction.rate, {"rate_per_second": 2.5, "rate_burst": 4}),
        (KeyAction.rate, {"rate_per_second": None, "rate_burst": None}),
        (KeyAction.rotate, {"grace_seconds": 120}),
        (KeyAction.reset, {}),
        (KeyAction.revoke, {}),
    ]
    assert {(r.actor, r.tenant_id) for r in records} == {("ops-alice", world.tenant.id)}
    assert [r.at for r in records] == sorted(r.at for r in records)


def test_audit_rows_never_hold_a_secret_or_its_hash(database: Database, world: TenantWorld) -> None:
    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=60)
    reset = admin.reset_key(database, world.key.key_id)
    with database.control() as connection:
        hashes = connection.execute(
            select(api_keys.c.secret_hash, api_keys.c.previous_secret_hash).where(
                api_keys.c.id == world.key.key_id
            )
        ).one()
        rows = connection.execute(
            select(api_key_audit).where(api_key_audit.c.key_id == world.key.key_id)
        ).all()

    stored = " ".join(str(value) for row in rows for value in row)
    assert len(rows) == 3  # issue, rotate, reset
    for api_key in (world.key.api_key, rotated.api_key, reset.api_key):
        assert _secret(api_key) not in stored
    for digest in (hashlib.sha256(_secret(world.key.api_key).encode()).digest(), *hashes):
        if digest is not None:
            assert bytes(digest).hex() not in stored and str(bytes(digest)) not in stored


def test_a_change_and_its_audit_row_commit_or_roll_back_together(
    database: Database, world: TenantWorld
) -> None:
    def revoke_then_fail() -> None:
        with database.control() as connection:
            api_keys_module.revoke_key(connection, world.key.key_id, actor="someone")
            raise RuntimeError("the operator's transaction fails after the change")

    with pytest.raises(RuntimeError):
        revoke_then_fail()

    (listed,) = admin.list_keys(database, world.tenant.id)
    assert listed.revoked_at is None
    assert [r.action for r in admin.key_audit(database, world.tenant.id)] == [KeyAction.issue]


def test_actor_falls_back_to_the_uid_without_a_user_name(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_user_name() -> str:
        raise KeyError("getpwuid(): uid not found")

    monkeypatch.setattr(getpass, "getuser", no_user_name)

    admin.revoke_key(database, world.key.key_id)

    assert admin.key_audit(database, world.tenant.id)[-1].actor == f"uid:{os.getuid()}"


def test_key_audit_of_an_unknown_tenant_is_not_found(database: Database) -> None:
    with pytest.raises(NotFound):
        admin.key_audit(database, uuid.uuid4())
