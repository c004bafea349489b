"""Operator workflows (the CLI's verbs): each composes tenancy and platform services."""

from __future__ import annotations

import getpass
import json
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dealbase.db.database import Database
from dealbase.migrations.runner import drop_tenant_role
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.pipeline.models import Department, DepartmentCreate, Employee, EmployeeCreate
from dealbase.platform.validation import validated
from dealbase.tenancy.callers import api_keys
from dealbase.tenancy.callers.api_keys import AuditRecord, IssuedKey, KeyInfo
from dealbase.tenancy.registry import lifecycle
from dealbase.tenancy.registry.lifecycle import DeletedTenant
from dealbase.tenancy.registry.tenants import Tenant, create_tenant, find_tenant_by_name, get_tenant
from dealbase.tenancy.scope import Rate

DEMO_TENANT = "demo"
DEMO_DEPARTMENT = "Sales"
DEMO_EMPLOYEE = "Dana Demo"
DEMO_KEY_NAME = "demo"


def tenant(database: Database, tenant_id: uuid.UUID) -> Tenant:
    with database.control() as connection:
        return get_tenant(connection, tenant_id)


def create_department(database: Database, tenant_id: uuid.UUID, name: str) -> Department:
    fields = validated(DepartmentCreate, {"name": name})
    with database.unit_of_work(tenant(database, tenant_id).scope) as uow:
        return pipeline.create_department(uow, fields)


def create_employee(
    database: Database, tenant_id: uuid.UUID, department_id: uuid.UUID, name: str, email: str | None
) -> Employee:
    fields = validated(EmployeeCreate, {"name": name, "email": email})
    with database.unit_of_work(tenant(database, tenant_id).scope) as uow:
        return pipeline.create_employee(uow, department_id, fields)


def operator() -> str:
    """Who is changing keys or tenants, for the audit: the operating-system user running the
    command."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        # No login name in the environment and a uid without a passwd entry (a container).
        return f"uid:{os.getuid()}"


def issue_key(
    database: Database,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    name: str | None,
    rate: Rate | None = None,
    expires_in: timedelta | None = None,
) -> IssuedKey:
    """A department key, or with ``department_id`` None a tenant-wide (dashboard) key."""
    with database.unit_of_work(tenant(database, tenant_id).scope) as uow:
        if department_id is not None:
            pipeline.get_department(uow, department_id)
    with database.control() as connection:
        return api_keys.issue_key(
            connection,
            tenant_id,
            department_id,
            name,
            rate,
            expires_in=expires_in,
            actor=operator(),
        )


def list_keys(database: Database, tenant_id: uuid.UUID) -> list[KeyInfo]:
    with database.control() as connection:
        get_tenant(connection, tenant_id)
        return api_keys.list_keys(connection, tenant_id)


def key_audit(database: Database, tenant_id: uuid.UUID) -> list[AuditRecord]:
    with database.control() as connection:
        get_tenant(connection, tenant_id)
        return api_keys.list_audit(connection, tenant_id)


def set_key_rate(database: Database, key_id: uuid.UUID, rate: Rate | None) -> KeyInfo:
    with database.control() as connection:
        return api_keys.set_key_rate(connection, key_id, rate, actor=operator())


def revoke_key(database: Database, key_id: uuid.UUID) -> KeyInfo:
    with database.control() as connection:
        return api_keys.revoke_key(connection, key_id, actor=operator())


def rotate_key(database: Database, key_id: uuid.UUID, grace_seconds: int) -> IssuedKey:
    with database.control() as connection:
        return api_keys.rotate_key(connection, key_id, grace_seconds, actor=operator())


def reset_key(database: Database, key_id: uuid.UUID) -> IssuedKey:
    with database.control() as connection:
        return api_keys.reset_key(connection, key_id, actor=operator())


def suspend_tenant(database: Database, tenant_id: uuid.UUID, reason: str | None) -> Tenant:
    with database.control() as connection:
        return lifecycle.suspend_tenant(connection, tenant_id, reason=reason, actor=operator())


def resume_tenant(database: Database, tenant_id: uuid.UUID) -> Tenant:
    with database.control() as connection:
        return lifecycle.resume_tenant(connection, tenant_id, actor=operator())


def delete_tenant(
    database: Database, tenant_id: uuid.UUID, *, distributed: bool = False
) -> DeletedTenant:
    with database.control() as connection:
        deleted = lifecycle.delete_tenant(
            connection, tenant_id, actor=operator(), distributed=distributed
        )
    if distributed:
        with database.control() as connection:
            drop_tenant_role(connection, deleted.tenant.schema)
    return deleted


@dataclass(frozen=True, slots=True)
class Demo:
    tenant: Tenant
    department: Department
    employee: Employee
    key: IssuedKey


def ensure_demo(database: Database, data_dir: Path, *, distributed: bool = False) -> Demo:
    """The demo tenant, department, employee and key, created once and found again after.

    The secret is stored only hashed, so the demo's key is kept in ``data_dir/demo-key.json``
    (mode 0600) to print it again; a missing or no longer valid file gets a fresh key.
    """
    with database.control() as connection:
        demo_tenant = find_tenant_by_name(connection, DEMO_TENANT)
    if demo_tenant is None:
        demo_tenant = create_tenant(database, DEMO_TENANT, distributed=distributed)
    with database.unit_of_work(demo_tenant.scope) as uow:
        department = pipeline.first_department(uow) or pipeline.create_department(
            uow, DepartmentCreate(name=DEMO_DEPARTMENT)
        )
        employee = pipeline.first_employee(uow, department.id) or pipeline.create_employee(
            uow, department.id, EmployeeCreate(name=DEMO_EMPLOYEE, email="dana@example.com")
        )
    key = _saved_demo_key(database, data_dir, demo_tenant, department.id)
    if key is None:
        # The old demo secret is lost with its file: retire it rather than leave it active.
        for old in list_keys(database, demo_tenant.id):
            if old.name == DEMO_KEY_NAME and old.revoked_at is None:
                revoke_key(database, old.key_id)
        key = issue_key(database, demo_tenant.id, department.id, DEMO_KEY_NAME)
        key_file = data_dir / "demo-key.json"
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"key_id": str(key.key_id), "api_key": key.api_key}, handle)
    return Demo(demo_tenant, department, employee, key)


def _saved_demo_key(
    database: Database, data_dir: Path, demo_tenant: Tenant, department_id: uuid.UUID
) -> IssuedKey | None:
    try:
        saved = json.loads((data_dir / "demo-key.json").read_text())
        parsed = api_keys.parse_api_key(saved["api_key"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if parsed is None:
        return None
    key_id, secret = parsed
    with database.control() as connection:
        credentials = api_keys.load_credentials(connection, key_id)
    if (
        credentials is None
        or credentials.tenant_id != demo_tenant.id
        or credentials.department_id != department_id
        or not credentials.accepts(secret, datetime.now(UTC))
    ):
        return None
    return IssuedKey(key_id, saved["api_key"], demo_tenant.id, department_id)
