"""Spare tenant schemas: made ahead of time by the worker, taken by ``create_tenant``.

A new tenant schema is some fifty relations and forty index builds: about 100 ms of DDL, most of
it PostgreSQL syncing each new index file to disk (bench/README.md, "scale.py"). Made ahead of
time, each with its role and grants, at the tenant tree's head, a spare turns creating a tenant
into taking a row and registering it: no DDL on that path. A spare's name is a tenant schema's
name, derived from an id the tenant then takes, so schema and id still match.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, func, insert, select

from dealbase.ids import new_id
from dealbase.migrations.runner import head_revision, upgrade_tenant
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


def prepare_spare_schema(connection: Connection, wanted: int, *, distributed: bool) -> str | None:
    """Makes one spare schema if fewer than ``wanted`` are there; returns its name, or None when
    there are enough."""
    connection.execute(select(func.pg_advisory_xact_lock(func.hashtext(_TOP_UP_LOCK))))
    spares = connection.execute(select(func.count()).select_from(spare_schemas)).scalar_one()
    if spares >= wanted:
        return None
    schema = schema_for_tenant(new_id())
    upgrade_tenant(connection, schema, distributed=distributed)
    connection.execute(
        insert(spare_schemas).values(
            schema_name=schema, schema_revision=head_revision("tenant"), created_at=func.now()
        )
    )
    return schema
