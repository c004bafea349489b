"""What Citus schema-based sharding needs of a tenant schema, kept true as migrations are added:
every tenant table has a primary key, and no foreign key leaves its schema, whether to another
tenant's or to the control schema (nor does a control table point into a tenant schema); and no
statement a unit of work runs names both a tenant schema and the control schema."""

from __future__ import annotations

import re

from sqlalchemy import text

from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields, CustomerPatch
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.tenancy.database import Database
from tests.support import TenantWorld

_TENANT_SCHEMA = re.compile(r'"?t_[0-9a-f]{32}"?\.')
_CONTROL_SCHEMA = re.compile(r"\bcontrol\.")


def test_every_tenant_table_has_a_primary_key(database: Database, world: TenantWorld) -> None:
    with database.control() as connection:
        tables = connection.execute(
            text(
                "SELECT c.relname,"
                " EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid"
                "         AND k.contype = 'p')"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = :schema AND c.relkind IN ('r', 'p')"
            ),
            {"schema": world.tenant.schema},
        ).all()

    assert len(tables) > 10
    assert [name for name, keyed in tables if not keyed] == []


def test_no_foreign_key_leaves_a_tenant_schema_or_enters_one_from_control(
    database: Database, world: TenantWorld
) -> None:
    with database.control() as connection:
        keys = connection.execute(
            text(
                "SELECT k.conname, src.nspname, dst.nspname"
                " FROM pg_constraint k"
                " JOIN pg_class s ON s.oid = k.conrelid"
                " JOIN pg_namespace src ON src.oid = s.relnamespace"
                " JOIN pg_class d ON d.oid = k.confrelid"
                " JOIN pg_namespace dst ON dst.oid = d.relnamespace"
                " WHERE k.contype = 'f' AND (src.nspname = :schema OR dst.nspname = :schema"
                "       OR src.nspname = 'control')"
            ),
            {"schema": world.tenant.schema},
        ).all()

    assert any(source == world.tenant.schema for _, source, _ in keys)
    crossing = [(name, source, target) for name, source, target in keys if source != target]
    assert crossing == []


def test_no_statement_names_both_a_tenant_schema_and_the_control_schema(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    statements: list[str] = []
    database.statement_listeners.append(statements.append)
    try:
        # An enabled endpoint makes every write also wake the webhook worker, by a statement
        # of its own into control.
        with database.unit_of_work(scope) as uow:
            endpoints.create(
                uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
            )
        with database.unit_of_work(scope) as uow:
            customer = customers.create(uow, CustomerFields(last_name="Lovelace"))
        with database.unit_of_work(scope) as uow:
            customers.update(uow, customer.id, CustomerPatch(city="London"))
            deliveries.send_test(uow, endpoints.list_page(uow, None, None).items[0].id)
    finally:
        database.statement_listeners.remove(statements.append)

    assert any(_CONTROL_SCHEMA.search(statement) for statement in statements)
    assert any(_TENANT_SCHEMA.search(statement) for statement in statements)
    both = [s for s in statements if _TENANT_SCHEMA.search(s) and _CONTROL_SCHEMA.search(s)]
    assert both == []
