"""Spare tenant schemas: made ahead of time, taken by a new tenant, kept at the head."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from dealbase.db.database import Database
from dealbase.errors import Conflict
from dealbase.migrations.runner import head_revision, upgrade_tenant
from dealbase.ops import admin
from dealbase.tenancy.registry.spare_schemas import prepare_spare_schema
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import schema_for_tenant
from dealbase.worker.spares import SpareSchemaKeeper
from tests.migrations.test_runner import _migrate
from tests.support import own_database_at_head

TENANT_HEAD = head_revision("tenant")


@pytest.fixture
def database(postgres_server: str) -> Iterator[Database]:
    """A database of its own: the spares made here must not be taken by other tests' tenants."""
    with own_database_at_head(postgres_server, "spares") as database:
        yield database


def _prepare(database: Database, wanted: int) -> str | None:
    return prepare_spare_schema(database, wanted, distributed=False)


def _spares(database: Database) -> dict[str, str]:
    with database.control() as connection:
        rows = connection.execute(
            text("SELECT schema_name, schema_revision FROM control.spare_schemas")
        )
        return {str(schema): str(revision) for schema, revision in rows}


def _schema_oid(database: Database, schema: str) -> int | None:
    with database.control() as connection:
        oid = connection.execute(
            text("SELECT oid::int FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
        ).scalar()
        return None if oid is None else int(oid)


def test_spares_are_made_until_there_are_as_many_as_wanted(database: Database) -> None:
    made = [_prepare(database, 2) for _ in range(3)]

    assert made[2] is None
    assert set(_spares(database)) == {made[0], made[1]}
    assert set(_spares(database).values()) == {TENANT_HEAD}


def test_a_new_tenant_takes_the_oldest_spare_and_its_id(database: Database) -> None:
    oldest, newer = _prepare(database, 2), _prepare(database, 2)
    assert oldest is not None
    spare_oid = _schema_oid(database, oldest)

    tenant = create_tenant(database, "takes-a-spare")

    assert tenant.schema == oldest == schema_for_tenant(tenant.id)
    assert _schema_oid(database, tenant.schema) == spare_oid  # the very schema, not a new one
    assert set(_spares(database)) == {newer}
    department = admin.create_department(database, tenant.id, "Sales")
    assert admin.create_employee(database, tenant.id, department.id, "Ann", None).name == "Ann"
    with database.control() as connection:
        recorded = connection.execute(
            text("SELECT schema_revision FROM control.tenants WHERE id = :id"), {"id": tenant.id}
        ).scalar()
    assert recorded == TENANT_HEAD


def test_without_a_spare_a_tenant_gets_a_schema_made_for_it(database: Database) -> None:
    tenant = create_tenant(database, "no-spare")

    assert _schema_oid(database, tenant.schema) is not None
    assert admin.create_department(database, tenant.id, "Sales").name == "Sales"


def test_a_failed_creation_puts_its_spare_back(database: Database) -> None:
    create_tenant(database, "taken-name")
    spare = _prepare(database, 1)

    with pytest.raises(Conflict):
        create_tenant(database, "taken-name")

    assert set(_spares(database)) == {spare}


def test_a_spare_behind_the_head_is_not_taken_and_migrate_brings_it_up(
    database: Database, tmp_path: Path
) -> None:
    spare = _prepare(database, 1)
    assert spare is not None
    with database.control() as connection:
        connection.execute(text(f'DROP SCHEMA "{spare}" CASCADE'))
        upgrade_tenant(connection, spare, "t0004")  # as an older release left it
    assert _spares(database) == {spare: "t0004"}

    tenant = create_tenant(database, "not-the-old-spare")
    run = _migrate(database.url, tmp_path)

    assert tenant.schema != spare
    assert run.json()["visited"] == 1
    assert _spares(database) == {spare: TENANT_HEAD}
    assert create_tenant(database, "takes-it-now").schema == spare


def test_the_worker_keeps_the_spares_topped_up(database: Database) -> None:
    keeper = SpareSchemaKeeper(database, 3, distributed=False)

    async def keep_until_three() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(keeper.run(stop))
        for _ in range(600):
            if len(_spares(database)) >= 3:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await running

    asyncio.run(keep_until_three())
    create_tenant(database, "takes-one")
    assert keeper.prepare_one() is not None
    assert keeper.prepare_one() is None
    assert len(_spares(database)) == 3
