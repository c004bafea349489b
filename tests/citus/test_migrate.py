"""``dealbase migrate`` on a Citus cluster."""

from __future__ import annotations

from sqlalchemy import create_engine

from dealbase.migrations.runner import current_revision, head_revision
from dealbase.tenancy.control_tables import CONTROL_SCHEMA
from dealbase.tenancy.database import sqlalchemy_url
from tests.ops.conftest import RunCli


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
