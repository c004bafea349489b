"""``dealbase migrate``: control and every tenant schema to head, resumable, failing per tenant."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges
from dealbase.migrations.runner import head_revision, upgrade_tenant
from dealbase.ops import admin
from dealbase.platform.custom_fields import service as custom_fields
from dealbase.platform.custom_fields.models import CustomFieldFields
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.validation import validated
from dealbase.tenancy.control_tables import CONTROL_SCHEMA
from dealbase.tenancy.registry.tenants import Tenant, create_tenant
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
from tests.ops.conftest import CliRun, invoke_cli
from tests.support import database_at

TENANT_HEAD = head_revision("tenant")
CONTROL_HEAD = head_revision("control")


def _migrate(database_url: str, data_dir: Path, *options: str) -> CliRun:
    return invoke_cli(
        ("migrate", "--json", *options),
        {
            "DEALBASE_DATABASE_URL": database_url,
            "DEALBASE_DATA_DIR": str(data_dir),
            "DEALBASE_LOG_LEVEL": "warning",
        },
    )


def _revision(database: Database, schema: str) -> str | None:
    """The revision recorded in ``schema``'s own version table (None when it has none)."""
    with database.control() as connection:
        table = connection.execute(
            text("SELECT to_regclass(:name)"), {"name": f'"{schema}".alembic_version'}
        ).scalar()
        if table is None:
            return None
        return connection.execute(
            text(f'SELECT version_num FROM "{schema}".alembic_version')
        ).scalar_one_or_none()


def _relations(database: Database, schema: str) -> dict[str, int]:
    """Every table and index of ``schema``, by name, with its oid (recreated -> new oid)."""
    with database.control() as connection:
        rows = connection.execute(
            text(
                "SELECT c.relname, c.oid::int FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :schema"
            ),
            {"schema": schema},
        )
        return {str(name): int(oid) for name, oid in rows}


def _assert_at_head_with(database: Database, tenants: list[Tenant], relations: set[str]) -> None:
    """Each tenant's schema is at the head revision, with exactly these relations."""
    for tenant in tenants:
        assert _revision(database, tenant.schema) == TENANT_HEAD, tenant.schema
        assert set(_relations(database, tenant.schema)) == relations, tenant.schema


def _execute(database: Database, sql: str) -> None:
    with database.control() as connection:
        connection.execute(text(sql))


def _tenants(database: Database, count: int) -> list[Tenant]:
    return [create_tenant(database, f"migrate-{secrets.token_hex(5)}") for _ in range(count)]


def _lose_schema(database: Database, tenant: Tenant) -> None:
    """A registered tenant whose schema is gone: migrate must build it from the first revision."""
    _execute(database, f'DROP SCHEMA "{tenant.schema}" CASCADE')


def _break(database: Database, tenant: Tenant) -> None:
    """Forget the schema's revision while its tables stay: re-running t0001 must fail."""
    _execute(database, f'DROP TABLE "{tenant.schema}".alembic_version')


def _summary(run: CliRun) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(run.stdout)
    return summary


def test_migrate_on_an_empty_database_creates_the_control_schema_at_head(
    empty_database_url: str, tmp_path: Path
) -> None:
    run = _migrate(empty_database_url, tmp_path)

    assert run.json() == {"tenants": 0, "visited": 0, "migrated": 0, "failed": [], "repaired": []}
    with database_at(empty_database_url) as database:
        assert _revision(database, CONTROL_SCHEMA) == CONTROL_HEAD


def test_migrate_all_brings_every_tenant_schema_to_head(
    migrated_database: Database, tmp_path: Path
) -> None:
    tenants = _tenants(migrated_database, 3)
    reference = set(_relations(migrated_database, tenants[0].schema))
    for tenant in tenants[1:]:
        _lose_schema(migrated_database, tenant)
    assert [_revision(migrated_database, t.schema) for t in tenants[1:]] == [None, None]

    run = _migrate(migrated_database.url, tmp_path, "--all")

    assert run.json() == {"tenants": 3, "visited": 3, "migrated": 3, "failed": [], "repaired": []}
    assert run.stderr == ""
    assert _revision(migrated_database, CONTROL_SCHEMA) == CONTROL_HEAD
    _assert_at_head_with(migrated_database, tenants, reference)


def test_migrating_many_tenants_at_once_puts_each_tenant_tree_in_its_own_schema(
    migrated_database: Database, tmp_path: Path
) -> None:
    tenants = _tenants(migrated_database, 12)
    reference = set(_relations(migrated_database, tenants[0].schema))
    for tenant in tenants:
        _lose_schema(migrated_database, tenant)

    run = _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", "8")

    assert run.exit_code == 0, str(run)
    assert run.json() == {
        "tenants": 12,
        "visited": 12,
        "migrated": 12,
        "failed": [],
        "repaired": [],
    }
    _assert_at_head_with(migrated_database, tenants, reference)


def test_migrate_again_is_a_no_op_that_keeps_schemas_and_data(
    migrated_database: Database, tmp_path: Path
) -> None:
    tenants = _tenants(migrated_database, 2)
    department = admin.create_department(migrated_database, tenants[0].id, "Kept")
    schemas = [CONTROL_SCHEMA, *(t.schema for t in tenants)]
    before = {schema: _relations(migrated_database, schema) for schema in schemas}

    # One tenant at a time: parallel runs are pinned by the test of many tenants at once.
    recorded = _migrate(migrated_database.url, tmp_path, "--concurrency", "1")
    visiting = _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", "1")

    assert recorded.exit_code == visiting.exit_code == 0, str(recorded) + str(visiting)
    summary = {"tenants": 2, "migrated": 2, "failed": [], "repaired": []}
    assert recorded.json() == {**summary, "visited": 0}
    assert visiting.json() == {**summary, "visited": 2}
    assert {schema: _relations(migrated_database, schema) for schema in schemas} == before
    kept = admin.create_employee(migrated_database, tenants[0].id, department.id, "Ann", None)
    assert kept.department_id == department.id


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_a_broken_tenant_is_reported_by_schema_while_the_others_reach_head(
    migrated_database: Database, tmp_path: Path, concurrency: str
) -> None:
    # The broken tenant comes first, so one at a time it is also the first one tried.
    broken, *healthy = _tenants(migrated_database, 4)
    for tenant in healthy:
        _lose_schema(migrated_database, tenant)
    _break(migrated_database, broken)
    broken_relations = _relations(migrated_database, broken.schema)

    run = _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", concurrency)

    assert run.exit_code != 0, str(run)
    assert not run.crashed, str(run)
    summary = _summary(run)
    assert [failure["schema"] for failure in summary["failed"]] == [broken.schema]
    assert summary["failed"][0]["error"].strip()
    assert (summary["tenants"], summary["migrated"]) == (4, 3)
    stderr_lines = run.stderr.strip().splitlines()
    assert len(stderr_lines) == 1, run.stderr
    assert broken.schema in stderr_lines[0]
    assert "Traceback" not in run.stderr
    for tenant in healthy:
        assert _revision(migrated_database, tenant.schema) == TENANT_HEAD, tenant.schema
    # The failed upgrade ran in one transaction: the broken schema is exactly as it was.
    assert _relations(migrated_database, broken.schema) == broken_relations


def test_migrate_resumes_a_repaired_tenant_and_then_succeeds(
    migrated_database: Database, tmp_path: Path
) -> None:
    broken, healthy = _tenants(migrated_database, 2)
    _break(migrated_database, broken)
    # One tenant at a time: parallel runs are pinned by the test of many tenants at once.
    assert _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", "1").exit_code != 0

    _lose_schema(migrated_database, broken)  # the operator's repair: start that schema afresh
    run = _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", "1")

    assert run.json() == {"tenants": 2, "visited": 2, "migrated": 2, "failed": [], "repaired": []}
    assert _revision(migrated_database, broken.schema) == TENANT_HEAD
    assert _revision(migrated_database, healthy.schema) == TENANT_HEAD


def test_migrate_recreates_a_missing_tenant_role_and_reports_the_repair(
    migrated_database: Database, tmp_path: Path
) -> None:
    """A tenant from before tenant roles, or whose role someone dropped: no unit of work can run
    until migrate puts the role and its grants back."""
    tenant, untouched = _tenants(migrated_database, 2)
    _execute(migrated_database, f'DROP OWNED BY "{tenant.schema}"; DROP ROLE "{tenant.schema}"')

    run = _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", "1")

    assert run.exit_code == 0, str(run)
    (repaired,) = run.json()["repaired"]
    assert repaired["schema"] == tenant.schema
    assert f"created role {tenant.schema}" in repaired["repairs"]
    assert untouched.schema not in {r["schema"] for r in run.json()["repaired"]}
    employee = admin.create_employee(
        migrated_database,
        tenant.id,
        admin.create_department(migrated_database, tenant.id, "Back").id,
        "Ann",
        None,
    )
    assert employee.name == "Ann"


def _recorded_revisions(database: Database) -> dict[str, str | None]:
    with database.control() as connection:
        rows = connection.execute(text("SELECT schema_name, schema_revision FROM control.tenants"))
        return {str(schema): revision for schema, revision in rows}


def _set_back(database: Database, tenant: Tenant, revision: str) -> None:
    """The tenant's schema made afresh at an older revision, as an older release left it."""
    _lose_schema(database, tenant)
    with database.control() as connection:
        upgrade_tenant(connection, tenant.schema, revision)


def test_creating_a_tenant_records_its_schema_revision(migrated_database: Database) -> None:
    (tenant,) = _tenants(migrated_database, 1)

    assert _recorded_revisions(migrated_database) == {tenant.schema: TENANT_HEAD}


def test_migrate_visits_only_the_schemas_recorded_behind_the_head(
    migrated_database: Database, tmp_path: Path
) -> None:
    older, unrecorded, current = _tenants(migrated_database, 3)
    _set_back(migrated_database, older, "t0004")
    _execute(
        migrated_database,
        f"UPDATE control.tenants SET schema_revision = NULL WHERE schema_name = '{unrecorded.schema}'",
    )
    # Recorded at head: migrate takes the record's word for it and never looks (--all does).
    _lose_schema(migrated_database, current)

    run = _migrate(migrated_database.url, tmp_path)

    assert run.json() == {"tenants": 3, "visited": 2, "migrated": 3, "failed": [], "repaired": []}
    assert _revision(migrated_database, older.schema) == TENANT_HEAD
    assert _revision(migrated_database, unrecorded.schema) == TENANT_HEAD
    assert _revision(migrated_database, current.schema) is None
    assert set(_recorded_revisions(migrated_database).values()) == {TENANT_HEAD}


def test_a_killed_migrate_resumes_with_the_schemas_it_had_not_reached(
    migrated_database: Database, tmp_path: Path
) -> None:
    tenants = _tenants(migrated_database, 5)
    for tenant in tenants:
        _set_back(migrated_database, tenant, "t0004")
    blocker = psycopg.connect(migrated_database.url, autocommit=True)
    # The third tenant's migrator lock is held, so a run one tenant at a time stops there.
    blocker.execute(
        "SELECT pg_advisory_lock(hashtext(%s))", (f"dealbase:migrate:{tenants[2].schema}",)
    )
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "dealbase"), "migrate", "--concurrency", "1"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("DEALBASE_")},
            "DEALBASE_DATABASE_URL": migrated_database.url,
            "DEALBASE_DATA_DIR": str(tmp_path),
            "DEALBASE_LOG_LEVEL": "warning",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while list(_recorded_revisions(migrated_database).values()).count(TENANT_HEAD) < 2:
            assert process.poll() is None and time.monotonic() < deadline, "migrate did not start"
            time.sleep(0.05)
        process.kill()
        process.wait(timeout=10)
    finally:
        blocker.close()
    recorded = _recorded_revisions(migrated_database)
    assert [recorded[t.schema] for t in tenants] == [TENANT_HEAD] * 2 + ["t0004"] * 3

    run = _migrate(migrated_database.url, tmp_path, "--concurrency", "1")

    assert run.json() == {"tenants": 5, "visited": 3, "migrated": 5, "failed": [], "repaired": []}
    for tenant in tenants:
        assert _revision(migrated_database, tenant.schema) == TENANT_HEAD, tenant.schema


def test_migrate_keeps_a_tenants_custom_fields_their_columns_and_the_roles_grants_on_them(
    migrated_database: Database, tmp_path: Path
) -> None:
    """A custom field's column is the tenant's own, outside the migrations: visiting and
    repairing the schema keeps it, and the tenant's role still writes it."""
    (tenant,) = _tenants(migrated_database, 1)
    department = admin.create_department(migrated_database, tenant.id, "Sales")
    changes = SchemaChanges(migrated_database.url, TENANT_OWNER_ROLE)
    try:
        field = asyncio.run(
            custom_fields.define(
                changes,
                tenant.scope,
                validated(
                    CustomFieldFields,
                    {"record": "customer", "name": "tier", "label": "Tier", "type": "text"},
                ),
            )
        )
    finally:
        changes.dispose()

    run = _migrate(migrated_database.url, tmp_path, "--all", "--concurrency", "1")

    assert run.exit_code == 0, str(run)
    scope = tenant.scope.in_department(department.id)
    with migrated_database.unit_of_work(scope) as uow:
        assert custom_fields.list_fields(uow, "customer") == [field]
        created = customers.create(uow, CustomerFields(last_name="Lovelace"))
        written = uow.connection.execute(
            text(
                f'UPDATE "{tenant.schema}".customers SET cf_tier = :tier WHERE id = :id'
                " RETURNING cf_tier"
            ),
            {"tier": "gold", "id": created.id},
        )
        assert written.scalar_one() == "gold"
