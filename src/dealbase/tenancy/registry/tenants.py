"""The tenant registry: creating a tenant runs the tenant migrations in its new schema.

A deleted tenant's row stays as a tombstone (its keys and audit rows refer to it); every lookup
here sees live tenants only, so a deleted tenant is as unknown as an id never issued.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, RowMapping, func, insert, select
from sqlalchemy.exc import IntegrityError

from dealbase.db.database import Database
from dealbase.errors import Conflict, Invalid, NotFound
from dealbase.ids import new_id
from dealbase.migrations.runner import create_distributed_schema, head_revision, upgrade_tenant
from dealbase.tenancy.control_tables import tenants
from dealbase.tenancy.registry.spare_schemas import discard_distributed_schema, take_spare_schema
from dealbase.tenancy.scope import Scope, schema_for_tenant, tenant_id_for_schema

MAX_TENANT_NAME_LENGTH = 200


@dataclass(frozen=True, slots=True)
class Tenant:
    id: uuid.UUID
    name: str
    schema: str
    created_at: datetime
    # Set while an operator has the tenant suspended: its keys are refused, its data kept.
    suspended_at: datetime | None

    @property
    def scope(self) -> Scope:
        return Scope(tenant_id=self.id, schema=self.schema)


def _tenant(row: RowMapping) -> Tenant:
    return Tenant(
        row["id"], row["name"], row["schema_name"], row["created_at"], row["suspended_at"]
    )


_live = tenants.c.deleted_at.is_(None)


def create_tenant(database: Database, name: str, *, distributed: bool = False) -> Tenant:
    """Registers the tenant with a schema at head: a spare made ahead of time when one is ready
    (no DDL), else one made now, in the registration's transaction: all or nothing.

    On a Citus cluster (``distributed``) a schema made now is a distributed schema, which
    commits empty before its tables are made (``create_distributed_schema``); when the rest
    fails, it is dropped again."""
    name = name.strip()
    if not name or len(name) > MAX_TENANT_NAME_LENGTH or "\x00" in name:
        raise Invalid.of(
            "name", "invalid", f"A tenant name has 1 to {MAX_TENANT_NAME_LENGTH} characters."
        )
    with database.control() as connection:
        spare = take_spare_schema(connection)
        if spare is not None:
            return _register(connection, name, spare, at_head=True)
        if not distributed:
            return _register(connection, name, schema_for_tenant(new_id()), at_head=False)
    schema = schema_for_tenant(new_id())
    with database.control() as connection:
        create_distributed_schema(connection, schema)
    try:
        with database.control() as connection:
            return _register(connection, name, schema, at_head=False, distributed=True)
    except Exception:
        discard_distributed_schema(database, schema)
        raise


def _register(
    connection: Connection, name: str, schema: str, *, at_head: bool, distributed: bool = False
) -> Tenant:
    """The tenant's row for the schema, which is brought to head unless ``at_head``."""
    try:
        row = (
            connection.execute(
                insert(tenants)
                .values(
                    id=tenant_id_for_schema(schema),
                    name=name,
                    schema_name=schema,
                    schema_revision=head_revision("tenant") if at_head else None,
                    created_at=func.now(),
                )
                .returning(*tenants.c)
            )
            .mappings()
            .one()
        )
    except IntegrityError as exc:
        if "tenants_live_name" in str(exc.orig):
            raise Conflict(f"A tenant named {name!r} exists already.") from None
        raise
    if not at_head:
        upgrade_tenant(connection, schema, distributed=distributed)
    return _tenant(row)


def list_tenants(connection: Connection) -> list[Tenant]:
    rows = connection.execute(
        select(tenants).where(_live).order_by(tenants.c.created_at, tenants.c.id)
    ).mappings()
    return [_tenant(row) for row in rows]


def get_tenant(connection: Connection, tenant_id: uuid.UUID, *, for_update: bool = False) -> Tenant:
    """The live tenant; ``for_update`` locks its row until the transaction ends (its state is
    about to change)."""
    query = select(tenants).where(tenants.c.id == tenant_id, _live)
    row = connection.execute(query.with_for_update() if for_update else query).mappings().first()
    if row is None:
        raise NotFound(f"No tenant has the id {tenant_id}.")
    return _tenant(row)


def find_tenant_by_name(connection: Connection, name: str) -> Tenant | None:
    row = (
        connection.execute(select(tenants).where(tenants.c.name == name, _live)).mappings().first()
    )
    return None if row is None else _tenant(row)
