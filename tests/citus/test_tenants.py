"""Tenants on a Citus cluster, by the operator's commands: each tenant's schema a distributed
schema whose tables live on one worker; made now or taken from the spares; its keys issued,
rotated and revoked; suspended, resumed, exported and deleted, the worker's copy of its schema
and role going with it."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.migrations.runner import head_revision
from dealbase.ops.export import client_tool
from dealbase.tenancy.registry.spare_schemas import prepare_spare_schema
from tests.ops.conftest import RunCli

API = "/api/v1/integration"
# A key or tenant change is in force on every process within this (docs/security.md): the CLI's
# NOTIFY reaches the app's key cache through its listener's thread.
IN_FORCE_WITHIN_S = 1.0


def _status_within(client: TestClient, headers: dict[str, str], status: int) -> Any:
    """GET /customers until it answers ``status``; fails after IN_FORCE_WITHIN_S."""
    deadline = time.monotonic() + IN_FORCE_WITHIN_S
    while True:
        answer = client.get(f"{API}/customers", headers=headers)
        if answer.status_code == status:
            return answer
        assert time.monotonic() < deadline, (answer.status_code, answer.text)
        time.sleep(0.01)


def _placement(citus_url: str, schema: str) -> dict[str, Any]:
    """Where the schema's tables live: the node of each shard of its tables."""
    with psycopg.connect(citus_url) as connection:
        distributed = connection.execute(
            "SELECT count(*) FROM citus_schemas WHERE schema_name::text = %s", (schema,)
        ).fetchone()
        nodes = connection.execute(
            "SELECT DISTINCT nodename || ':' || nodeport FROM citus_shards"
            " WHERE table_name::text LIKE %s",
            (f"{schema}.%",),
        ).fetchall()
    return {"distributed": distributed == (1,), "nodes": [node for (node,) in nodes]}


def _on_workers(citus_url: str, query: str, *parameters: object) -> list[Any]:
    """``query``'s first value on every worker, through Citus."""
    with psycopg.connect(citus_url) as connection:
        rows = connection.execute(
            "SELECT result FROM run_command_on_workers(%s)",
            (query % tuple(f"'{parameter}'" for parameter in parameters),),
        ).fetchall()
    return [result for (result,) in rows]


def test_a_tenant_made_now_is_a_distributed_schema_at_head_on_one_worker(
    citus_url: str, run_on_cluster: RunCli
) -> None:
    assert run_on_cluster("migrate").exit_code == 0
    tenant = run_on_cluster("tenant", "create", f"acme-{uuid.uuid4().hex[:8]}", "--json").json()

    placement = _placement(citus_url, tenant["schema"])
    assert placement["distributed"] and len(placement["nodes"]) == 1, placement
    with psycopg.connect(citus_url) as connection:
        revision = connection.execute(
            "SELECT schema_revision FROM control.tenants WHERE id = %s", (tenant["id"],)
        ).fetchone()
    assert revision == (head_revision("tenant"),)
    # Its role may log in on every node: Citus reaches the worker as that role.
    assert _on_workers(
        citus_url, "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", tenant["schema"]
    ) == ["t", "t"]


def test_a_tenant_takes_a_spare_made_ahead_as_a_distributed_schema(
    citus_url: str, cluster_database: Database, run_on_cluster: RunCli
) -> None:
    # Spares are the cluster's: other tests of the tier may take this one first.
    spare = prepare_spare_schema(cluster_database, 1_000_000, distributed=True)
    assert spare is not None
    assert _placement(citus_url, spare)["distributed"]

    schemas = set()
    for _ in range(3):
        tenant = run_on_cluster("tenant", "create", f"spare-{uuid.uuid4().hex[:8]}", "--json")
        schemas.add(tenant.json()["schema"])
        if spare in schemas:
            break
    with psycopg.connect(citus_url) as connection:
        left = connection.execute(
            "SELECT count(*) FROM control.spare_schemas WHERE schema_name = %s", (spare,)
        ).fetchone()
    assert spare in schemas or left == (0,), "the spare was neither taken nor left"


def _tenant_with_a_key(run_on_cluster: RunCli, name: str) -> tuple[Any, Any, Any]:
    """A tenant made by the CLI, with a department and a key: each as the CLI's JSON."""
    tenant = run_on_cluster("tenant", "create", f"{name}-{uuid.uuid4().hex[:8]}", "--json").json()
    department = run_on_cluster(
        "department", "create", "--tenant", tenant["id"], "Sales", "--json"
    ).json()
    key = run_on_cluster(
        "key", "issue", "--tenant", tenant["id"], "--department", department["id"], "--json"
    ).json()
    return tenant, department, key


@pytest.mark.serial  # in force within IN_FORCE_WITHIN_S of the command: alone on the machine
def test_key_changes_and_a_suspension_on_the_cluster_are_in_force_within_a_second(
    cluster_client: TestClient, run_on_cluster: RunCli
) -> None:
    tenant, department, key = _tenant_with_a_key(run_on_cluster, "keys")

    def headers(api_key: str) -> dict[str, str]:
        return {"X-Api-Key": api_key, "X-Department-Id": department["id"]}

    created = cluster_client.post(
        f"{API}/customers", json={"last_name": "Lovelace"}, headers=headers(key["api_key"])
    )
    assert created.status_code == 201, created.text

    rotated = run_on_cluster("key", "rotate", key["key_id"], "--grace-seconds", "0", "--json")
    new_key = rotated.json()["api_key"]
    assert cluster_client.get(f"{API}/customers", headers=headers(new_key)).status_code == 200
    listed = run_on_cluster("key", "list", "--tenant", tenant["id"], "--json").json()
    assert [each["key_id"] for each in listed] == [key["key_id"]]

    assert run_on_cluster("tenant", "suspend", tenant["id"], "--json").exit_code == 0
    suspended = _status_within(cluster_client, headers(new_key), 403)
    assert suspended.json()["code"] == "tenant_suspended"
    assert run_on_cluster("tenant", "resume", tenant["id"], "--json").exit_code == 0
    assert cluster_client.get(f"{API}/customers", headers=headers(new_key)).status_code == 200

    limited = run_on_cluster("key", "update", key["key_id"], "--rate", "2/s", "--burst", "4")
    assert limited.exit_code == 0, str(limited)
    reset = run_on_cluster("key", "reset", key["key_id"], "--json").json()
    _status_within(cluster_client, headers(new_key), 401)
    new_key = reset["api_key"]
    assert cluster_client.get(f"{API}/customers", headers=headers(new_key)).status_code == 200
    audit = run_on_cluster("key", "audit", "--tenant", tenant["id"], "--json").json()
    assert [entry["action"] for entry in audit][-4:] == ["issue", "rotate", "rate", "reset"]

    assert run_on_cluster("key", "revoke", key["key_id"], "--json").exit_code == 0
    _status_within(cluster_client, headers(new_key), 401)


def test_a_tenant_on_the_cluster_is_exported_and_deleted_with_its_schema_and_role_on_the_workers(
    citus_url: str, cluster_client: TestClient, run_on_cluster: RunCli, tmp_path: Path
) -> None:
    tenant, department, key = _tenant_with_a_key(run_on_cluster, "life")
    created = cluster_client.post(
        f"{API}/customers",
        json={"last_name": "Lovelace"},
        headers={"X-Api-Key": key["api_key"], "X-Department-Id": department["id"]},
    )
    assert created.status_code == 201, created.text

    exported = run_on_cluster(
        "tenant", "export", tenant["id"], "--output", str(tmp_path / "export"), "--json"
    )
    assert exported.exit_code == 0, str(exported)
    customers = (tmp_path / "export" / "customers.jsonl").read_text().splitlines()
    assert [json.loads(line)["last_name"] for line in customers] == ["Lovelace"]
    # pg_dump through the coordinator reads the worker's rows too.
    dumped = run_on_cluster(
        "tenant", "export", tenant["id"], "--output", str(tmp_path / "dump"),
        "--format", "pg-dump", "--json",
    )  # fmt: skip
    assert dumped.exit_code == 0, str(dumped)
    with psycopg.connect(citus_url) as connection:
        pg_restore = client_tool("pg_restore", connection.info.server_version // 10000)
    assert pg_restore is not None
    script = subprocess.run(
        [pg_restore, "--file=-", dumped.json()["file"]], check=True, capture_output=True, text=True
    ).stdout
    assert "\tLovelace\t" in script

    deleted = run_on_cluster("tenant", "delete", tenant["id"], "--yes", "--json")
    assert deleted.exit_code == 0, str(deleted)
    schema = tenant["schema"]
    assert _placement(citus_url, schema) == {"distributed": False, "nodes": []}
    assert _on_workers(
        citus_url, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", schema
    ) == ["0", "0"]
    assert _on_workers(citus_url, "SELECT count(*) FROM pg_roles WHERE rolname = %s", schema) == [
        "0",
        "0",
    ]
