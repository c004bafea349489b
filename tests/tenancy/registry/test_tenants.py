"""Provisioning: a tenant is its own schema, brought to head by the tenant migrations."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from dealbase.db.database import Database
from dealbase.errors import Conflict, Invalid
from dealbase.migrations.runner import current_revision, head_revision
from dealbase.tenancy.registry.tenants import create_tenant, list_tenants


def test_new_tenant_gets_its_own_schema_at_the_tenant_head(database: Database) -> None:
    tenant = create_tenant(database, "schema-check")

    with database.control() as connection:
        assert current_revision(connection, tenant.schema) == head_revision("tenant")
        tables = set(
            connection.execute(
                text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
                {"s": tenant.schema},
            ).scalars()
        )
    assert tenant.schema == f"t_{tenant.id.hex}"
    assert {
        "departments", "steps", "employees", "customers", "deals", "deal_customers",
        "activities", "alembic_version",
    } <= tables  # fmt: skip


def test_tenant_names_are_unique(database: Database) -> None:
    create_tenant(database, "unique-name")

    with pytest.raises(Conflict):
        create_tenant(database, "unique-name")


@pytest.mark.parametrize("name", ["", "   ", "x" * 201, "nul\x00"])
def test_bad_tenant_name_creates_nothing(database: Database, name: str) -> None:
    with database.control() as connection:
        before = len(list_tenants(connection))

    with pytest.raises(Invalid):
        create_tenant(database, name)

    with database.control() as connection:
        assert len(list_tenants(connection)) == before
