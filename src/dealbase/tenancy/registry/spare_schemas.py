"""Spare tenant schemas: made ahead of time by the worker, taken by ``create_tenant``.

A new tenant schema is some fifty relations and forty index builds, most of their time spent by
PostgreSQL syncing each new index file to disk. Made ahead of
time, each with its role and grants, at the tenant tree's head, a spare turns creating a tenant
into taking a row and registering it: no DDL on that path. A spare's name is a tenant schema's
name, derived from an id the tenant then takes, so schema and id still match.
"""

from __future__ import annotations

import contextlib

from sqlalchemy import Connection, delete, func, insert, select

from dealbase.db.database import Database
from dealbase.ids import new_id
from dealbase.migrations.runner import (
    create_distributed_schema,
    drop_tenant_role,
    drop_tenant_schema,
    head_revision,
    upgrade_tenant,
)
from dealbase.tenancy.control_tables import spare_schemas
from dealbase.tenancy.scope import schema_for_tenant

# Serialises the workers that top up the spares, so that together they make no more than wanted.
_TOP_UP_LOCK = "dealbase:spare-schemas"


def take_spare_schema(connection: Connection) -> str | None:
    """The oldest spare at the head, removed from the spares in the caller's transaction (a
    rollback puts it back); None when there is none."""
    oldest = (
        select(spare_schemas.c.schema_name)
        .where(spare_schemas.c.schema_revision == head_revision("tenant"))
        .order_by(spare_schemas.c.created_at)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    taken: str | None = connection.execute(
        delete(spare_schemas)
        .where(spare_schemas.c.schema_name == oldest)
        .returning(spare_schemas.c.schema_name)
    ).scalar_one_or_none()
    return taken


def prepare_spare_schema(database: Database, wanted: int, *, distributed: bool) -> str | None:
    """Makes one spare schema if fewer than ``wanted`` are there; returns its name, or None when
    there are enough. On a Citus cluster (``distributed``) the schema commits empty first
    (``create_distributed_schema``) and is dropped again if the rest fails."""
    schema = schema_for_tenant(new_id())
    if distributed:
        with database.control() as connection:
            if not _wanted(connection, wanted):
                return None
            create_distributed_schema(connection, schema)
    try:
        with database.control() as connection:
            # Counted again under the lock: on a cluster, another worker may have made one
            # since the schema above.
            made = _wanted(connection, wanted)
            if made:
                upgrade_tenant(connection, schema, distributed=distributed)
                connection.execute(
                    insert(spare_schemas).values(
                        schema_name=schema,
                        schema_revision=head_revision("tenant"),
                        created_at=func.now(),
                    )
                )
    except Exception:
        if distributed:
            discard_distributed_schema(database, schema)
        raise
    if not made and distributed:
        discard_distributed_schema(database, schema)
    return schema if made else None


def discard_distributed_schema(database: Database, schema: str) -> None:
    """Drops a distributed schema whose making failed after ``create_distributed_schema``, then
    its role. An empty schema that a failed cleanup leaves behind holds no data and no key
    reaches it; the error that matters is the one that brought the caller here."""
    with contextlib.suppress(Exception):
        with database.control() as connection:
            drop_tenant_schema(connection, schema)
        with database.control() as connection:
            drop_tenant_role(connection, schema)


def _wanted(connection: Connection, wanted: int) -> bool:
    """Whether fewer than ``wanted`` spares are there; serialises the workers that top them up
    until the transaction ends."""
    connection.execute(select(func.pg_advisory_xact_lock(func.hashtext(_TOP_UP_LOCK))))
    spares = connection.execute(select(func.count()).select_from(spare_schemas)).scalar_one()
    return bool(spares < wanted)
