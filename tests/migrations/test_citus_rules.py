"""What Citus schema-based sharding needs of a tenant schema, kept true as migrations are added:
every tenant table has a primary key, and no foreign key leaves its schema, whether to another
tenant's or to the control schema (nor does a control table point into a tenant schema); and no
statement a unit of work runs names both a tenant schema and the control schema. And that a
tenant schema is created as a distributed schema when the setting asks for it."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from dealbase.db.database import Database
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields, CustomerPatch
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.worker.spares import SpareSchemaKeeper
from tests.ops.conftest import invoke_cli
from tests.support import TenantWorld, database_at, scratch_database

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
            customers.RECORD.update(uow, customer.id, CustomerPatch(city="London"))
            deliveries.send_test(uow, endpoints.list_page(uow, None, None).items[0].id)
    finally:
        database.statement_listeners.remove(statements.append)

    assert any(_CONTROL_SCHEMA.search(statement) for statement in statements)
    assert any(_TENANT_SCHEMA.search(statement) for statement in statements)
    both = [s for s in statements if _TENANT_SCHEMA.search(s) and _CONTROL_SCHEMA.search(s)]
    assert both == []


def _record_created_schemas(database_url: str) -> None:
    """An event trigger notes each schema created and the Citus sharding setting at that
    moment (a placeholder setting here, as PostgreSQL allows for a prefix no extension owns)."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            """
            CREATE TABLE public.created_schemas (name text, sharding text);
            CREATE FUNCTION public.note_created_schema() RETURNS event_trigger
                LANGUAGE plpgsql SECURITY DEFINER AS $$
            DECLARE created record;
            BEGIN
                FOR created IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
                    INSERT INTO public.created_schemas VALUES (
                        created.object_identity,
                        current_setting('citus.enable_schema_based_sharding', true));
                END LOOP;
            END $$;
            CREATE EVENT TRIGGER note_created_schema ON ddl_command_end
                WHEN TAG IN ('CREATE SCHEMA') EXECUTE FUNCTION public.note_created_schema();
            """
        )


def _created_schemas(database_url: str) -> dict[str, str | None]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute("SELECT name, sharding FROM public.created_schemas").fetchall()
    return dict(rows)


# Serial: with the setting on, the migration lets the owner role (the whole PostgreSQL
# server's) log in, and every other test's migration takes that away again, each with an
# ALTER ROLE that fails if the other's is under way ("tuple concurrently updated").
@pytest.mark.serial
@pytest.mark.parametrize("spares", ["0", "1"])
def test_with_the_setting_on_tenant_schemas_are_created_distributed_and_control_is_not(
    postgres_server: str, tmp_path: Path, spares: str
) -> None:
    with scratch_database(postgres_server, "citus") as url:
        _record_created_schemas(url)
        env = {
            "DEALBASE_DATABASE_URL": url,
            "DEALBASE_DATA_DIR": str(tmp_path),
            "DEALBASE_LOG_LEVEL": "warning",
            "DEALBASE_CITUS_SCHEMA_SHARDING": "true",
        }
        assert invoke_cli(("migrate",), env).exit_code == 0
        if spares == "1":  # the worker makes spares with the same setting
            with database_at(url) as database:
                SpareSchemaKeeper(database, 1, distributed=True).prepare_one()
        created = invoke_cli(("tenant", "create", "distributed", "--json"), env)
        plain = invoke_cli(
            ("tenant", "create", "plain", "--json"),
            {
                **env,
                "DEALBASE_CITUS_SCHEMA_SHARDING": "false",
                "DEALBASE_SPARE_TENANT_SCHEMAS": "0",
            },
        )

        schemas = _created_schemas(url)

    assert schemas["control"] in (None, "")
    assert schemas[created.json()["schema"]] == "on"
    assert schemas[plain.json()["schema"]] != "on"
