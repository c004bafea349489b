"""The tenant registry: creating a tenant runs the tenant migrations in its new schema."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, RowMapping, func, insert, select
from sqlalchemy.exc import IntegrityError

from dealbase.errors import Conflict, Invalid, NotFound
from dealbase.ids import new_id
from dealbase.migrations.runner import upgrade_tenant
from dealbase.tenancy.control_tables import tenants
from dealbase.tenancy.database import Database
from dealbase.tenancy.scope import Scope, schema_for_tenant

MAX_TENANT_NAME_LENGTH = 200


@dataclass(frozen=True, slots=True)
class Tenant:
    id: uuid.UUID
    name: str
    schema: str
    created_at: datetime

    @property
    def scope(self) -> Scope:
        return Scope(tenant_id=self.id, schema=self.schema)


def _tenant(row: RowMapping) -> Tenant:
    return Tenant(row["id"], row["name"], row["schema_name"], row["created_at"])


def create_tenant(database: Database, name: str) -> Tenant:
    """Registers the tenant and migrates its schema to head in one transaction: all or nothing."""
    name = name.strip()
    if not name or len(name) > MAX_TENANT_NAME_LENGTH or "\x00" in name:
        raise Invalid.of(
            "name", "invalid", f"A tenant name has 1 to {MAX_TENANT_NAME_LENGTH} characters."
        )
    tenant_id = new_id()
    try:
        with database.control() as connection:
            row = (
                connection.execute(
                    insert(tenants)
                    .values(
                        id=tenant_id,
                        name=name,
                        schema_name=schema_for_tenant(tenant_id),
                        created_at=func.now(),
                    )
                    .returning(*tenants.c)
                )
                .mappings()
                .one()
            )
            upgrade_tenant(connection, row["schema_name"])
    except IntegrityError as exc:
        if "tenants_name_key" in str(exc.orig):
            raise Conflict(f"A tenant named {name!r} exists already.") from None
        raise
    return _tenant(row)


def list_tenants(connection: Connection) -> list[Tenant]:
    rows = connection.execute(
        select(tenants).order_by(tenants.c.created_at, tenants.c.id)
    ).mappings()
    return [_tenant(row) for row in rows]


def get_tenant(connection: Connection, tenant_id: uuid.UUID) -> Tenant:
    row = connection.execute(select(tenants).where(tenants.c.id == tenant_id)).mappings().first()
    if row is None:
        raise NotFound(f"No tenant has the id {tenant_id}.")
    return _tenant(row)


def find_tenant_by_name(connection: Connection, name: str) -> Tenant | None:
    row = connection.execute(select(tenants).where(tenants.c.name == name)).mappings().first()
    return None if row is None else _tenant(row)
