"""``dealbase tenant suspend``, ``resume`` and ``delete``: their output, the state ``tenant list``
shows, the confirmation a deletion asks for, and what a deletion leaves for ``migrate``."""

from __future__ import annotations

import os
import pty
import re
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.ops.conftest import CliRun, RunCli, invoke_cli
from tests.support import DEALBASE, TenantWorld, schema_and_role_exist, scratch_database

TIMESTAMP_SHAPE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"


def _assert_one_line_failure(run: CliRun, exit_code: int = 1) -> None:
    assert run.exit_code == exit_code, str(run)
    assert not run.crashed, str(run)
    assert run.stdout == "", str(run)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), str(run)


def _listed(run_cli: RunCli, tenant_id: uuid.UUID) -> dict[str, Any] | None:
    listed: list[dict[str, Any]] = run_cli("tenant", "list", "--json").json()
    return next((t for t in listed if t["id"] == str(tenant_id)), None)


def test_suspend_and_resume_print_the_tenant_and_tenant_list_shows_the_state(
    run_cli: RunCli, world: TenantWorld
) -> None:
    tenant_id = str(world.tenant.id)

    suspended = run_cli("tenant", "suspend", tenant_id, "--reason", "unpaid", "--json").json()

    assert set(suspended) == {"id", "name", "schema", "created_at", "suspended_at"}
    assert re.match(TIMESTAMP_SHAPE, suspended["suspended_at"])
    assert _listed(run_cli, world.tenant.id) == suspended
    human = run_cli("tenant", "list").stdout
    assert f"{world.tenant.schema}  suspended  {world.tenant.name}" in human

    resumed = run_cli("tenant", "resume", tenant_id, "--json").json()

    assert resumed == {**suspended, "suspended_at": None}
    assert _listed(run_cli, world.tenant.id) == resumed
    assert (
        f"{world.tenant.schema}  active     {world.tenant.name}" in run_cli("tenant", "list").stdout
    )


def test_suspending_twice_or_resuming_an_active_tenant_fails_in_one_line(
    run_cli: RunCli, world: TenantWorld
) -> None:
    tenant_id = str(world.tenant.id)
    _assert_one_line_failure(run_cli("tenant", "resume", tenant_id))
    run_cli("tenant", "suspend", tenant_id, "--json").json()

    again = run_cli("tenant", "suspend", tenant_id)

    _assert_one_line_failure(again)
    assert "suspended already" in again.stderr


def test_delete_yes_removes_the_tenant_from_the_list_and_its_keys_answer_401(
    run_cli: RunCli, world: TenantWorld, client: TestClient, database: Database
) -> None:
    customers = "/api/v1/integration/customers"
    assert client.post(customers, json={"last_name": "x"}, headers=world.key.headers).is_success

    deleted = run_cli("tenant", "delete", str(world.tenant.id), "--yes", "--json").json()

    assert deleted == {
        "id": str(world.tenant.id),
        "name": world.tenant.name,
        "schema": world.tenant.schema,
        "keys_revoked": 1,
        "wakeups_deleted": 0,
    }
    assert _listed(run_cli, world.tenant.id) is None
    assert schema_and_role_exist(database.url, world.tenant.schema) == (False, False)
    refused = client.post(customers, json={"last_name": "x"}, headers=world.key.headers)
    assert refused.status_code == 401
    recreated = run_cli("tenant", "create", world.tenant.name, "--json").json()
    assert recreated["id"] != str(world.tenant.id)


def test_a_deleted_or_unknown_tenant_is_refused_by_every_lifecycle_command_in_one_line(
    run_cli: RunCli, world: TenantWorld, tmp_path: Path
) -> None:
    run_cli("tenant", "delete", str(world.tenant.id), "--yes", "--json").json()

    for tenant_id in (str(world.tenant.id), str(uuid.uuid4())):
        for command in (
            ("suspend", tenant_id),
            ("resume", tenant_id),
            ("delete", tenant_id, "--yes"),
            ("delete", tenant_id),
            ("export", tenant_id, "--output", str(tmp_path / "export")),
        ):
            run = run_cli("tenant", *command)
            _assert_one_line_failure(run)
            assert f"No tenant has the id {tenant_id}" in run.stderr, str(run)
    assert not (tmp_path / "export").exists()


def test_delete_without_yes_and_without_a_terminal_refuses_and_deletes_nothing(
    run_cli: RunCli, world: TenantWorld, database: Database
) -> None:
    run = run_cli("tenant", "delete", str(world.tenant.id))

    _assert_one_line_failure(run)
    assert "--yes" in run.stderr
    assert _listed(run_cli, world.tenant.id) is not None
    assert schema_and_role_exist(database.url, world.tenant.schema) == (True, True)


def _delete_on_a_terminal(
    tenant_id: uuid.UUID, typed: str, env: dict[str, str | None]
) -> subprocess.CompletedProcess[str]:
    """``dealbase tenant delete`` with a terminal for its input, on which ``typed`` is typed."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [str(DEALBASE), "tenant", "delete", str(tenant_id)],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **{name: value for name, value in os.environ.items() if name not in env},
                **{name: value for name, value in env.items() if value is not None},
            },
        )
        os.close(terminal)
        os.write(controller, f"{typed}\n".encode())
        stdout, stderr = process.communicate(timeout=60)
    finally:
        os.close(controller)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_delete_on_a_terminal_refuses_a_name_that_is_not_the_tenants(
    world: TenantWorld, cli_env: dict[str, str | None], database: Database
) -> None:
    answered = _delete_on_a_terminal(world.tenant.id, world.tenant.name + "x", cli_env)

    assert answered.returncode == 1, answered
    assert "Type the tenant's name to confirm" in answered.stderr
    assert answered.stdout == ""
    assert answered.stderr.endswith("error: that is not the tenant's name; nothing was deleted\n")
    assert schema_and_role_exist(database.url, world.tenant.schema) == (True, True)


def test_delete_on_a_terminal_deletes_once_the_tenants_name_is_typed(
    world: TenantWorld, cli_env: dict[str, str | None], database: Database
) -> None:
    answered = _delete_on_a_terminal(world.tenant.id, world.tenant.name, cli_env)

    assert answered.returncode == 0, answered
    assert answered.stdout == (
        f"tenant {world.tenant.id} ({world.tenant.schema}) deleted; keys revoked: 1\n"
    )
    assert schema_and_role_exist(database.url, world.tenant.schema) == (False, False)


@pytest.fixture
def own_database_url(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "lifecycle") as url:
        yield url


def test_migrate_after_a_deletion_leaves_the_deleted_tenant_gone(
    own_database_url: str, cli_env: dict[str, str | None]
) -> None:
    env = {**cli_env, "DEALBASE_DATABASE_URL": own_database_url}

    def run(*args: str) -> CliRun:
        return invoke_cli(args, env)

    assert run("migrate", "--json").json()["tenants"] == 0
    kept = run("tenant", "create", f"kept-{secrets.token_hex(4)}", "--json").json()
    deleted = run("tenant", "create", f"deleted-{secrets.token_hex(4)}", "--json").json()
    run("tenant", "delete", deleted["id"], "--yes", "--json").json()

    migrated = run("migrate", "--json").json()

    assert (migrated["tenants"], migrated["failed"]) == (1, [])
    assert schema_and_role_exist(own_database_url, deleted["schema"]) == (False, False)
    assert schema_and_role_exist(own_database_url, kept["schema"]) == (True, True)
