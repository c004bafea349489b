"""Keys are stored as hashes only, and their lifecycle rules hold."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import select

from dealbase.errors import Conflict, Invalid, NotFound
from dealbase.ops import admin
from dealbase.tenancy.api_keys import MAX_GRACE_SECONDS
from dealbase.tenancy.control_tables import api_keys
from dealbase.tenancy.database import Database
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
