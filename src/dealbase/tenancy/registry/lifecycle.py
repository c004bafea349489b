"""Suspending, resuming and deleting a tenant: operators' changes to a tenant as a whole.

Each change runs in the caller's control transaction together with its audit row
(``control.tenant_audit``) and a notice that makes every server process drop the tenant's keys
from its cache when the change commits: a suspension refuses the tenant's very next request on
every process, whether its key was cached or not.

A deleted tenant's schema, role and webhook wakeups are gone and its keys revoked. Its row stays
as a tombstone (its keys and audit rows refer to it) that every lookup passes over, so its id
answers like an unknown one and its name is free for a new tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Connection, func, insert, update

from dealbase.errors import Conflict, Invalid
from dealbase.migrations.runner import drop_tenant_role, drop_tenant_schema, lock_schema
from dealbase.tenancy.callers.api_keys import announce_tenant_change, revoke_tenant_keys
from dealbase.tenancy.control_tables import tenant_audit, tenants
from dealbase.tenancy.coordination import wakeups
from dealbase.tenancy.registry.tenants import Tenant, get_tenant
from dealbase.tenancy.scope import checked_schema_name

MAX_REASON_LENGTH = 1000


class TenantAction(StrEnum):
    """What a tenant audit row records; the values are stored."""

    suspend = "suspend"
    resume = "resume"
    delete = "delete"


@dataclass(frozen=True, slots=True)
class DeletedTenant:
    """The tenant as it was, and what went with it besides its schema and role."""

    tenant: Tenant
    keys_revoked: int
    wakeups_deleted: int


def _audit(
    connection: Connection,
    tenant_id: uuid.UUID,
    action: TenantAction,
    actor: str,
    details: Mapping[str, object],
) -> None:
    """Records the change in the caller's transaction: both commit, or neither."""
    connection.execute(
        insert(tenant_audit).values(
            tenant_id=tenant_id,
            action=action.value,
            actor=actor,
            at=func.now(),
            details=dict(details),
        )
    )


def suspend_tenant(
    connection: Connection, tenant_id: uuid.UUID, *, reason: str | None, actor: str
) -> Tenant:
    """Refuses every key of the tenant (403 ``tenant_suspended``) from the commit on; its data,
    keys and webhook deliveries already under way stay."""
    if reason is not None and (len(reason) > MAX_REASON_LENGTH or "\x00" in reason):
        raise Invalid.of(
            "reason", "invalid", f"A reason has at most {MAX_REASON_LENGTH} characters."
        )
    tenant = get_tenant(connection, tenant_id, for_update=True)
    if tenant.suspended_at is not None:
        raise Conflict(f"The tenant {tenant_id} is suspended already.")
    suspended_at: datetime = connection.execute(
        update(tenants)
        .where(tenants.c.id == tenant_id)
        .values(suspended_at=func.now())
        .returning(tenants.c.suspended_at)
    ).scalar_one()
    _audit(connection, tenant_id, TenantAction.suspend, actor, {"reason": reason})
    announce_tenant_change(connection, tenant_id)
    return replace(tenant, suspended_at=suspended_at)


def resume_tenant(connection: Connection, tenant_id: uuid.UUID, *, actor: str) -> Tenant:
    """Accepts the tenant's keys again from the commit on."""
    tenant = get_tenant(connection, tenant_id, for_update=True)
    if tenant.suspended_at is None:
        raise Conflict(f"The tenant {tenant_id} is not suspended.")
    connection.execute(update(tenants).where(tenants.c.id == tenant_id).values(suspended_at=None))
    _audit(connection, tenant_id, TenantAction.resume, actor, {})
    # Servers may hold its keys as suspended: they read them again.
    announce_tenant_change(connection, tenant_id)
    return replace(tenant, suspended_at=None)


def delete_tenant(
    connection: Connection, tenant_id: uuid.UUID, *, actor: str, distributed: bool = False
) -> DeletedTenant:
    """Drops the tenant's schema with everything in it and its role, deletes its wakeups,
    revokes its keys and marks its row deleted, all in the caller's transaction. On a Citus
    cluster (``distributed``) the role is left to ``drop_tenant_role`` once that has committed.

    A unit of work of the tenant still under way holds locks on its tables, which the drop
    waits for; servers drop the tenant's keys from their caches on commit, and the keys are
    revoked, so no request reaches the tenant afterwards.
    """
    schema = checked_schema_name(get_tenant(connection, tenant_id).schema)
    # Before the tenant's row: a migrator holds this lock while it upgrades the schema and
    # records the revision in that row, so the other order could deadlock with it.
    lock_schema(connection, schema)
    tenant = get_tenant(connection, tenant_id, for_update=True)
    drop_tenant_schema(connection, schema)
    if not distributed:
        drop_tenant_role(connection, schema)
    wakeups_deleted = wakeups.forget_schema(connection, schema)
    keys_revoked = revoke_tenant_keys(
        connection, tenant_id, actor=actor, details={"reason": "tenant deleted"}
    )
    connection.execute(
        update(tenants).where(tenants.c.id == tenant_id).values(deleted_at=func.now())
    )
    _audit(
        connection,
        tenant_id,
        TenantAction.delete,
        actor,
        {"name": tenant.name, "schema": schema, "keys_revoked": keys_revoked},
    )
    announce_tenant_change(connection, tenant_id)
    return DeletedTenant(tenant, keys_revoked, wakeups_deleted)
