"""Suspending, resuming and deleting tenants: each change audited in its own transaction,
a deletion leaving nothing of the tenant but its tombstone, and nothing on a deleted tenant."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from dealbase.db.database import Database
from dealbase.errors import Conflict, Invalid, NotFound
from dealbase.migrations.runner import lock_schema, upgrade_tenant
from dealbase.ops import admin
from dealbase.tenancy.callers.api_keys import list_audit, list_keys, load_credentials
from dealbase.tenancy.control_tables import tenant_audit, tenants, webhook_wakeups
from dealbase.tenancy.coordination import wakeups
from dealbase.tenancy.registry import lifecycle
from dealbase.tenancy.registry.tenants import (
    create_tenant,
    find_tenant_by_name,
    get_tenant,
    list_tenants,
)
from tests.support import (
    TenantWorld,
    control_at_head,
    database_at,
    non_superuser_login,
    schema_and_role_exist,
    wait_until_a_transaction_waits_for_a_lock,
)

ACTOR = "test-operator"


def audit_of(database: Database, tenant_id: uuid.UUID) -> list[dict[str, Any]]:
    with database.control() as connection:
        rows = connection.execute(
            select(tenant_audit.c.action, tenant_audit.c.actor, tenant_audit.c.details)
            .where(tenant_audit.c.tenant_id == tenant_id)
            .order_by(tenant_audit.c.id)
        ).mappings()
        return [dict(row) for row in rows]


def wake(database: Database, world: TenantWorld) -> None:
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.execute(wakeups.WAKEUP)


def wakeups_of(database: Database, schema: str) -> int:
    with database.control() as connection:
        return len(
            connection.execute(
                select(webhook_wakeups.c.id).where(webhook_wakeups.c.schema_name == schema)
            ).all()
        )


def test_suspending_marks_the_tenant_and_audits_the_reason_and_a_second_suspension_conflicts(
    database: Database, world: TenantWorld
) -> None:
    before = datetime.now(UTC)
    with database.control() as connection:
        suspended = lifecycle.suspend_tenant(
            connection, world.tenant.id, reason="invoice unpaid", actor=ACTOR
        )

    assert suspended.suspended_at is not None
    assert before - timedelta(seconds=5) < suspended.suspended_at <= datetime.now(UTC)
    with database.control() as connection:
        assert get_tenant(connection, world.tenant.id).suspended_at == suspended.suspended_at
        with pytest.raises(Conflict, match="suspended already"):
            lifecycle.suspend_tenant(connection, world.tenant.id, reason=None, actor=ACTOR)
    assert audit_of(database, world.tenant.id) == [
        {"action": "suspend", "actor": ACTOR, "details": {"reason": "invoice unpaid"}}
    ]


def test_resuming_clears_the_suspension_once_and_audits_it(
    database: Database, world: TenantWorld
) -> None:
    with database.control() as connection, pytest.raises(Conflict, match="not suspended"):
        lifecycle.resume_tenant(connection, world.tenant.id, actor=ACTOR)
    with database.control() as connection:
        lifecycle.suspend_tenant(connection, world.tenant.id, reason=None, actor=ACTOR)

    with database.control() as connection:
        resumed = lifecycle.resume_tenant(connection, world.tenant.id, actor=ACTOR)

    assert resumed.suspended_at is None
    with database.control() as connection:
        assert get_tenant(connection, world.tenant.id).suspended_at is None
    assert [row["action"] for row in audit_of(database, world.tenant.id)] == ["suspend", "resume"]


def test_a_suspension_that_fails_leaves_neither_the_change_nor_an_audit_row(
    database: Database, world: TenantWorld
) -> None:
    def suspend_and_fail() -> None:
        with database.control() as connection:
            lifecycle.suspend_tenant(connection, world.tenant.id, reason=None, actor=ACTOR)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        suspend_and_fail()

    with database.control() as connection:
        assert get_tenant(connection, world.tenant.id).suspended_at is None
    assert audit_of(database, world.tenant.id) == []


@pytest.mark.parametrize("reason", ["x" * (lifecycle.MAX_REASON_LENGTH + 1), "nul\x00"])
def test_a_reason_too_long_or_with_nul_is_refused_and_suspends_nothing(
    database: Database, world: TenantWorld, reason: str
) -> None:
    with database.control() as connection, pytest.raises(Invalid):
        lifecycle.suspend_tenant(connection, world.tenant.id, reason=reason, actor=ACTOR)

    with database.control() as connection:
        assert get_tenant(connection, world.tenant.id).suspended_at is None


def test_the_tenants_keys_carry_its_suspension(database: Database, world: TenantWorld) -> None:
    with database.control() as connection:
        lifecycle.suspend_tenant(connection, world.tenant.id, reason=None, actor=ACTOR)
        suspended = load_credentials(connection, world.key.key_id)
        lifecycle.resume_tenant(connection, world.tenant.id, actor=ACTOR)
        resumed = load_credentials(connection, world.key.key_id)

    assert suspended is not None and suspended.tenant_suspended
    assert resumed is not None and not resumed.tenant_suspended


def test_deleting_drops_the_schema_the_role_and_the_wakeups_and_revokes_every_key(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    doomed, neighbour = make_tenant(departments=2), make_tenant()
    schema = doomed.tenant.schema
    already_revoked = doomed.keys[1].key_id
    admin.revoke_key(database, already_revoked)
    wake(database, doomed)
    wake(database, neighbour)
    assert schema_and_role_exist(database.url, schema) == (True, True)

    with database.control() as connection:
        deleted = lifecycle.delete_tenant(connection, doomed.tenant.id, actor=ACTOR)

    assert (deleted.keys_revoked, deleted.wakeups_deleted) == (1, 1)
    assert schema_and_role_exist(database.url, schema) == (False, False)
    assert wakeups_of(database, schema) == 0
    assert wakeups_of(database, neighbour.tenant.schema) == 1
    with database.control() as connection:
        keys = list_keys(connection, doomed.tenant.id)
        key_audit = list_audit(connection, doomed.tenant.id)
        tombstone = connection.execute(
            select(tenants.c.deleted_at).where(tenants.c.id == doomed.tenant.id)
        ).scalar_one()
    assert all(key.revoked_at is not None for key in keys)
    revocations = [(r.key_id, r.actor, r.details) for r in key_audit if r.action == "revoke"]
    assert revocations == [
        (already_revoked, admin.operator(), {}),
        (doomed.keys[0].key_id, ACTOR, {"reason": "tenant deleted"}),
    ]
    assert tombstone is not None
    assert audit_of(database, doomed.tenant.id) == [
        {
            "action": "delete",
            "actor": ACTOR,
            "details": {"name": doomed.tenant.name, "schema": schema, "keys_revoked": 1},
        }
    ]


def test_a_deleted_tenant_is_unknown_to_every_lookup_and_every_change(
    database: Database, world: TenantWorld
) -> None:
    tenant = world.tenant
    with database.control() as connection:
        lifecycle.delete_tenant(connection, tenant.id, actor=ACTOR)

    with database.control() as connection:
        assert tenant.id not in {t.id for t in list_tenants(connection)}
        assert find_tenant_by_name(connection, tenant.name) is None
        with pytest.raises(NotFound):
            get_tenant(connection, tenant.id)
    changes: list[Callable[[Any], object]] = [
        lambda c: lifecycle.suspend_tenant(c, tenant.id, reason=None, actor=ACTOR),
        lambda c: lifecycle.resume_tenant(c, tenant.id, actor=ACTOR),
        lambda c: lifecycle.delete_tenant(c, tenant.id, actor=ACTOR),
    ]
    for change in changes:
        with database.control() as connection, pytest.raises(NotFound, match="No tenant"):
            change(connection)
    assert [row["action"] for row in audit_of(database, tenant.id)] == ["delete"]


def test_an_unknown_tenant_cannot_be_suspended_resumed_or_deleted(database: Database) -> None:
    unknown = uuid.uuid4()
    changes: list[Callable[[Any], object]] = [
        lambda c: lifecycle.suspend_tenant(c, unknown, reason=None, actor=ACTOR),
        lambda c: lifecycle.resume_tenant(c, unknown, actor=ACTOR),
        lambda c: lifecycle.delete_tenant(c, unknown, actor=ACTOR),
    ]
    for change in changes:
        with database.control() as connection, pytest.raises(NotFound):
            change(connection)


def test_a_deleted_tenants_name_is_free_for_a_new_tenant(
    database: Database, world: TenantWorld
) -> None:
    with database.control() as connection:
        lifecycle.delete_tenant(connection, world.tenant.id, actor=ACTOR)

    again = create_tenant(database, world.tenant.name)

    assert again.id != world.tenant.id
    with database.control() as connection:
        assert find_tenant_by_name(connection, world.tenant.name) == again


def test_a_visit_ending_after_the_deletion_schedules_no_wakeup_for_the_schema(
    database: Database, world: TenantWorld
) -> None:
    """A worker that was visiting when the tenant was deleted would otherwise leave a wakeup
    that fails its visit every minute, for ever."""
    schema = world.tenant.schema
    with database.control() as connection:
        lifecycle.delete_tenant(connection, world.tenant.id, actor=ACTOR)

    with database.control() as connection:
        wakeups.end_visit(connection, uuid.uuid4(), schema, datetime.now(UTC))

    assert wakeups_of(database, schema) == 0


def test_a_deletion_waits_for_a_migration_of_the_same_schema(
    database: Database, world: TenantWorld
) -> None:
    finished = threading.Event()

    def delete() -> None:
        with database.control() as connection:
            lifecycle.delete_tenant(connection, world.tenant.id, actor=ACTOR)
        finished.set()

    with database.control() as migrating:
        lock_schema(migrating, world.tenant.schema)
        deleting = threading.Thread(target=delete)
        deleting.start()
        wait_until_a_transaction_waits_for_a_lock(database)
        assert not finished.is_set(), "the deletion did not wait for the migrator's lock"
    deleting.join(timeout=10)

    assert finished.is_set()
    assert schema_and_role_exist(database.url, world.tenant.schema) == (False, False)


def test_a_migration_that_listed_the_tenant_before_its_deletion_does_not_recreate_it(
    database: Database, world: TenantWorld
) -> None:
    schema = world.tenant.schema
    with database.control() as connection:
        lifecycle.delete_tenant(connection, world.tenant.id, actor=ACTOR)

    with database.control() as connection:  # what a migrate run's worker then does
        repairs = upgrade_tenant(connection, schema)

    assert repairs == []
    assert schema_and_role_exist(database.url, schema) == (False, False)


def test_a_login_role_that_is_not_a_superuser_deletes_a_tenant(postgres_server: str) -> None:
    """As in production: the login role becomes the owner to drop the schema, and drops the
    role it created."""
    with non_superuser_login(postgres_server) as (_, url), database_at(url) as database:
        control_at_head(database)
        tenant = create_tenant(database, "deleted by the service's login role")
        admin.create_department(database, tenant.id, "Sales")

        with database.control() as connection:
            lifecycle.delete_tenant(connection, tenant.id, actor=ACTOR)

        assert schema_and_role_exist(url, tenant.schema) == (False, False)
