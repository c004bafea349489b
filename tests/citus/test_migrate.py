"""``dealbase migrate`` on a Citus cluster."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, func, insert, select

import dealbase.migrations
from dealbase.db.database import Database, sqlalchemy_url
from dealbase.ids import new_id
from dealbase.migrations.runner import (
    create_distributed_schema,
    current_revision,
    head_revision,
    upgrade_tenant,
)
from dealbase.tenancy.control_tables import CONTROL_SCHEMA, tenants
from dealbase.tenancy.scope import schema_for_tenant
from tests.ops.conftest import RunCli


def _previous_revision() -> str:
    config = Config()
    config.set_main_option(
        "script_location", str(Path(dealbase.migrations.__file__).parent / "tenant")
    )
    head = ScriptDirectory.from_config(config).get_revision("head")
    assert head is not None and isinstance(head.down_revision, str)
    return head.down_revision


PREVIOUS_REVISION = _previous_revision()


def test_migrate_brings_the_control_schema_to_head_on_the_cluster_and_again_changes_nothing(
    citus_url: str, run_on_cluster: RunCli
) -> None:
    first = run_on_cluster("migrate")
    again = run_on_cluster("migrate")

    assert first.exit_code == 0, str(first)
    assert again.exit_code == 0, str(again)
    assert "Running upgrade" not in again.stdout + again.stderr, str(again)
    engine = create_engine(sqlalchemy_url(citus_url))
    try:
        with engine.connect() as connection:
            assert current_revision(connection, CONTROL_SCHEMA) == head_revision("control")
    finally:
        engine.dispose()


def test_migrate_brings_a_distributed_tenant_schema_that_is_behind_to_head(
    citus_url: str, cluster_database: Database, run_on_cluster: RunCli
) -> None:
    """A migration added after the tenant was made runs over its distributed schema: here the
    tenant tree's last one, whose sequence Citus creates on the workers too."""
    tenant_id = new_id()
    schema = schema_for_tenant(tenant_id)
    with cluster_database.control() as connection:
        create_distributed_schema(connection, schema)
    with cluster_database.control() as connection:
        connection.execute(
            insert(tenants).values(
                id=tenant_id, name=f"behind-{tenant_id}", schema_name=schema, created_at=func.now()
            )
        )
        upgrade_tenant(connection, schema, PREVIOUS_REVISION, distributed=True)

    migrated = run_on_cluster("migrate", "--json")

    assert migrated.exit_code == 0, str(migrated)
    assert migrated.json()["failed"] == []
    with cluster_database.control() as connection:
        assert current_revision(connection, schema) == head_revision("tenant")
        recorded = connection.execute(
            select(tenants.c.schema_revision).where(tenants.c.id == tenant_id)
        ).scalar_one()
    assert recorded == head_revision("tenant")
