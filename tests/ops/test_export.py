"""``dealbase tenant export``: every table of the tenant's data as JSON Lines with a manifest that
counts them, or a pg_dump archive that pg_restore brings back; never into a directory in use."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from dealbase.db.database import Database
from dealbase.migrations.runner import head_revision, upgrade_control
from dealbase.ops import admin, export
from dealbase.ops.export import client_tool, export_jsonl, export_pg_dump
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.tenancy.registry.tenants import create_tenant
from tests.ops.conftest import CliRun, RunCli
from tests.support import TenantWorld, non_superuser_login, scratch_database

API = "/api/v1/integration"
TIMESTAMP_SHAPE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
# Everything JSON and COPY escape: a backslash, quotes, a tab, a newline, and beyond ASCII.
AWKWARD = 'Ó\'Brien \\ "the\tfirst"\nof her name ✓'


def _fill(client: TestClient, world: TenantWorld) -> dict[str, Any]:
    """Three customers (one with an awkward name), a deal with two more, and a create whose
    response is kept for replay (an idempotency record)."""
    headers = world.key.headers
    for last_name in ("Lovelace", "Hopper", AWKWARD):
        assert client.post(f"{API}/customers", json={"last_name": last_name}, headers=headers)
    deal = client.post(
        f"{API}/deals",
        json={"name": "Big one", "customers": [{"last_name": "Turing"}, {"last_name": "Noether"}]},
        headers={**headers, "Idempotency-Key": "deal-1"},
    )
    assert deal.status_code == 201, deal.text
    body: dict[str, Any] = deal.json()
    return body


def _rows(database_url: str, schema: str, table: str) -> list[Any]:
    """The table as row_to_json gives it, in primary-key order, read straight from PostgreSQL."""
    with psycopg.connect(database_url) as connection:
        connection.execute("SET TIME ZONE 'UTC'")
        key = connection.execute(
            "SELECT array_agg(a.attname ORDER BY k.position) FROM pg_index i"
            " CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position)"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            " WHERE i.indrelid = %s::regclass AND i.indisprimary",
            [f'"{schema}"."{table}"'],
        ).fetchone()
        assert key is not None
        query = sql.SQL("SELECT row_to_json(t) FROM {}.{} t ORDER BY {}").format(
            sql.Identifier(schema),
            sql.Identifier(table),
            sql.SQL(", ").join(sql.Identifier("t", column) for column in key[0]),
        )
        return [row[0] for row in connection.execute(query)]


def _tables(database_url: str, schema: str) -> set[str]:
    with psycopg.connect(database_url) as connection:
        found = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", [schema]
        ).fetchall()
    return {name for (name,) in found}


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_jsonl_writes_each_tables_rows_in_key_order_and_a_manifest_that_counts_them(
    run_cli: RunCli, client: TestClient, world: TenantWorld, database: Database, tmp_path: Path
) -> None:
    deal = _fill(client, world)
    schema = world.tenant.schema
    output = tmp_path / "export"
    started = datetime.now(UTC)

    printed = run_cli("tenant", "export", str(world.tenant.id), "--output", str(output), "--json")

    manifest = json.loads((output / "manifest.json").read_text())
    assert printed.json() == manifest
    assert {k: v for k, v in manifest.items() if k not in ("exported_at", "files")} == {
        "format": "jsonl",
        "tenant_id": str(world.tenant.id),
        "name": world.tenant.name,
        "schema": schema,
        "schema_revision": head_revision("tenant"),
    }
    assert re.match(TIMESTAMP_SHAPE, manifest["exported_at"])
    exported_at = datetime.fromisoformat(manifest["exported_at"])
    assert started - timedelta(seconds=5) < exported_at <= datetime.now(UTC)
    exported = {file["table"] for file in manifest["files"]}
    assert exported == _tables(database.url, schema) - {"alembic_version", "idempotency_records"}
    assert sorted(path.name for path in output.iterdir()) == sorted(
        [*(f"{table}.jsonl" for table in exported), "manifest.json"]
    )
    for file in manifest["files"]:
        assert file["file"] == f"{file['table']}.jsonl"
        rows = _lines(output / file["file"])
        assert rows == _rows(database.url, schema, file["table"]), file["table"]
        assert file["rows"] == len(rows)
    counts = {file["table"]: file["rows"] for file in manifest["files"]}
    assert (counts["departments"], counts["customers"], counts["deals"]) == (1, 5, 1)
    assert counts["deal_customers"] == 2
    exported_customers = _lines(output / "customers.jsonl")
    assert AWKWARD in {customer["last_name"] for customer in exported_customers}
    assert [row["id"] for row in _lines(output / "deals.jsonl")] == [deal["id"]]
    assert _mode(output) == 0o700
    assert {_mode(path) for path in output.iterdir()} == {0o600}


def _assert_refused(run: CliRun, says: str) -> None:
    assert run.exit_code == 1, str(run)
    assert run.stdout == "", str(run)
    assert run.stderr.count("\n") == 1 and says in run.stderr, str(run)


@pytest.mark.parametrize("export_format", ["jsonl", "pg-dump"])
def test_a_directory_in_use_is_refused_and_left_as_it_was(
    run_cli: RunCli, world: TenantWorld, tmp_path: Path, export_format: str
) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("mine too")

    for output in (used, a_file):
        run = run_cli(
            "tenant", "export", str(world.tenant.id), "--output", str(output),
            "--format", export_format,
        )  # fmt: skip
        _assert_refused(run, "is not an empty directory")

    assert [path.name for path in used.iterdir()] == ["notes.txt"]
    assert a_file.read_text() == "mine too"


def test_an_empty_directory_is_exported_into(
    run_cli: RunCli, world: TenantWorld, tmp_path: Path
) -> None:
    run = run_cli("tenant", "export", str(world.tenant.id), "--output", str(tmp_path), "--json")

    assert run.json()["tenant_id"] == str(world.tenant.id)
    assert (tmp_path / "manifest.json").exists()


def test_pg_dump_export_restores_with_pg_restore_into_another_database(
    run_cli: RunCli,
    client: TestClient,
    world: TenantWorld,
    database: Database,
    postgres_server: str,
    tmp_path: Path,
) -> None:
    _fill(client, world)
    schema = world.tenant.schema
    output = tmp_path / "dump"

    printed = run_cli(
        "tenant", "export", str(world.tenant.id), "--output", str(output),
        "--format", "pg-dump", "--json",
    ).json()  # fmt: skip

    dump = output / f"{schema}.dump"
    assert printed == {"tenant_id": str(world.tenant.id), "format": "pg-dump", "file": str(dump)}
    assert [path.name for path in output.iterdir()] == [dump.name]
    assert _mode(dump) == 0o600
    with psycopg.connect(postgres_server) as server:
        pg_restore = client_tool("pg_restore", server.info.server_version // 10000)
    assert pg_restore is not None
    with scratch_database(postgres_server, "restore") as restored:
        subprocess.run(
            [pg_restore, "--no-owner", "--no-privileges", f"--dbname={restored}", str(dump)],
            check=True,
            capture_output=True,
        )
        restored_customers = _rows(restored, schema, "customers")
        # The scratch database's clean-up drops the roles of the tenant schemas it holds: this
        # one is the live tenant's, on the same cluster.
        with psycopg.connect(restored, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert restored_customers == _rows(database.url, schema, "customers")
    assert len(restored_customers) == 5


def test_pg_dump_export_without_a_pg_dump_for_the_server_says_so_in_one_line(
    run_cli: RunCli, world: TenantWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "dump"
    monkeypatch.setattr(export, "client_tool_candidates", lambda name: [])

    run = run_cli(
        "tenant", "export", str(world.tenant.id), "--output", str(output), "--format", "pg-dump",
    )  # fmt: skip

    _assert_refused(run, "no pg_dump of PostgreSQL")
    assert not output.exists()


def test_a_login_role_that_is_not_a_superuser_exports_both_formats(
    postgres_server: str, tmp_path: Path
) -> None:
    """As in production: the login role reads a tenant's tables only as its tenant's role (or
    the owner's, for pg_dump), never with privileges of its own."""
    with non_superuser_login(postgres_server) as (_, url):
        database = Database(url, pool_size=1)
        try:
            with database.control() as connection:
                upgrade_control(connection)
            tenant = create_tenant(database, "exported by the service's login role")
            department = admin.create_department(database, tenant.id, "Sales")
            with database.unit_of_work(tenant.scope.in_department(department.id)) as uow:
                customers.create(uow, CustomerFields(last_name="Lovelace"))

            manifest = export_jsonl(database, tenant, tmp_path / "jsonl")
            dump = export_pg_dump(url, tenant, tmp_path / "dump")
        finally:
            database.dispose()

    assert {file.table: file.rows for file in manifest.files}["customers"] == 1
    assert _lines(tmp_path / "jsonl" / "customers.jsonl")[0]["last_name"] == "Lovelace"
    assert dump.stat().st_size > 0


def test_jsonl_carries_the_custom_fields_definitions_and_their_columns_values(
    run_cli: RunCli, client: TestClient, world: TenantWorld, database: Database, tmp_path: Path
) -> None:
    admin_key = admin.issue_key(database, world.tenant.id, None, "admin").api_key
    defined = client.post(
        f"{API}/custom-fields",
        json={"record": "customer", "name": "contract", "label": "Contract", "type": "text"},
        headers={"X-Api-Key": admin_key},
    )
    assert defined.status_code == 201, defined.text
    customer = client.post(
        f"{API}/customers", json={"last_name": "Lovelace"}, headers=world.key.headers
    )
    with psycopg.connect(database.url, autocommit=True) as connection:
        connection.execute(
            f'UPDATE "{world.tenant.schema}".customers SET cf_contract = %s', [AWKWARD]
        )
    output = tmp_path / "export"

    run_cli("tenant", "export", str(world.tenant.id), "--output", str(output))

    [definition] = _lines(output / "custom_fields.jsonl")
    [row] = _lines(output / "customers.jsonl")
    assert (definition["id"], definition["name"]) == (defined.json()["id"], "contract")
    assert (row["id"], row["cf_contract"]) == (customer.json()["id"], AWKWARD)
