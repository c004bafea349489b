"""The scratch stack of one run: a database of its own on the PostgreSQL server, dealbase's tenant,
department, employees and key made with the `dealbase` CLI, and the servers under test."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from harness.paths import BASELINES, POSTGRAPHILE, ROOT, venv_tool
from harness.processes import Service, free_port
from harness.settings import BenchSettings
from harness.tools import node_environment

REST_PREFIX = "/api/v1/integration"
# Far above any load here, so no request is refused; dealbase's ceiling is 100000/s.
GENEROUS_RATE = "100000/s"
GENEROUS_BURST = "1000000"
# The tables the seed fills and the reads read.
SEEDED_TABLES = ("customers", "deals", "deal_customers", "activities", "employees", "steps")


def database_url(server: str, name: str) -> str:
    """`server` (a URL of any database on the server) pointed at the database `name`."""
    base, _, query = server.partition("?")
    return f"{base.rpartition('/')[0]}/{name}" + (f"?{query}" if query else "")


@contextmanager
def scratch_database(server: str, *, keep: bool = False) -> Iterator[str]:
    """A new database on the server, dropped (with its connections) when the run ends, and the
    roles of its tenants with it (roles belong to the cluster and would outlive it); ``keep``
    leaves both for a later run to reuse."""
    name = f"dealbase_bench_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = database_url(server, name)
    try:
        yield url
    finally:
        if not keep:
            drop_database(server, url)


def drop_database(server: str, url: str) -> None:
    """Drops the database at ``url`` and its tenants' roles."""
    name = url.partition("?")[0].rpartition("/")[2]
    with psycopg.connect(url, autocommit=True) as connection:
        roles = [
            role
            for (role,) in connection.execute(
                "SELECT nspname FROM pg_namespace JOIN pg_roles ON rolname = nspname"
                " WHERE nspname ~ '^t_[0-9a-f]{32}$'"
            )
        ]
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        for role in roles:
            connection.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def analyze(database: str, schema: str, tables: Sequence[str] = SEEDED_TABLES) -> None:
    """ANALYZE a tenant's tables, as autovacuum keeps a database analysed. It is off on the
    machines the benchmarks run on, and a statement planned on the statistics of a table that
    has grown since is planned for another table: a read joined a full scan where it would look
    up its own rows."""
    with psycopg.connect(database, autocommit=True) as connection:
        for table in tables:
            connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))


def clean_environment() -> dict[str, str]:
    """This process's environment without any DEALBASE_ setting of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("DEALBASE_")}


@dataclass(frozen=True)
class Tenant:
    """What the CLI made: ids, the schema, the key (with its secret) and the steps."""

    tenant_id: str
    schema: str
    department_id: str
    step_ids: tuple[str, ...]
    employee_ids: tuple[str, ...]
    key_id: str
    api_key: str
    # Every department of the tenant with a key of its own, "<api key> <department id>", the
    # first being the one above: the lines of bench/wrk/post_customers_departments.lua's file.
    department_keys: tuple[str, ...] = ()

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Api-Key": self.api_key, "X-Department-Id": self.department_id}


def dealbase_cli(
    database: str, *arguments: str, environment: dict[str, str] | None = None
) -> tuple[Any, float]:
    """`dealbase ARGUMENTS` on ``database``, with ``environment`` and none of the caller's
    DEALBASE_ settings: what it printed, read as JSON when ``--json`` is among the arguments
    (else None), and its seconds, its start-up included."""
    started = time.perf_counter()
    result = subprocess.run(
        [venv_tool("dealbase"), *arguments],
        env={**clean_environment(), **(environment or {}), "DEALBASE_DATABASE_URL": database},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(
            f"dealbase {' '.join(arguments)} failed ({result.returncode}):"
            f" {result.stderr.strip() or result.stdout.strip()}"
        )
    text = result.stdout.strip()
    return (json.loads(text) if text and "--json" in arguments else None), seconds


def _cli(database: str, *arguments: str) -> Any:
    return dealbase_cli(database, *arguments, "--json")[0]


def provision(
    database: str,
    employees: int = 5,
    *,
    name: str = "bench",
    migrate: bool = True,
    departments: int = 1,
) -> Tenant:
    """Migrates the scratch database (unless a tenant was made on it already) and makes the
    tenant the run loads, through the CLI: its first department with employees and a key, and
    ``departments - 1`` more, each with a key."""
    if migrate:
        _cli(database, "migrate")
    tenant = _cli(database, "tenant", "create", name)
    department = _cli(database, "department", "create", "--tenant", tenant["id"], "Sales")
    employee_ids = [
        _cli(
            database,
            "employee",
            "create",
            "--tenant",
            tenant["id"],
            "--department",
            department["id"],
            f"Employee {index}",
            "--email",
            f"employee{index}@example.com",
        )["id"]
        for index in range(1, employees + 1)
    ]

    def issue_key(department_id: str, name: str) -> Any:
        return _cli(
            database,
            *("key", "issue", "--tenant", tenant["id"], "--department", department_id),
            *("--name", name, "--rate", GENEROUS_RATE, "--burst", GENEROUS_BURST),
        )

    key = issue_key(department["id"], "bench")
    department_keys = [f"{key['api_key']} {department['id']}"]
    for index in range(2, departments + 1):
        other = _cli(database, "department", "create", "--tenant", tenant["id"], f"Sales {index}")
        other_key = issue_key(other["id"], f"bench {index}")
        department_keys.append(f"{other_key['api_key']} {other['id']}")
    return Tenant(
        tenant_id=tenant["id"],
        schema=tenant["schema"],
        department_id=department["id"],
        step_ids=tuple(step["id"] for step in department["steps"]),
        employee_ids=tuple(employee_ids),
        key_id=key["key_id"],
        api_key=key["api_key"],
        department_keys=tuple(department_keys),
    )


def dealbase_environment(database: str, settings: BenchSettings, port: int) -> dict[str, str]:
    """Every production feature on: keys, tenant routing, Redis rate limits, JSON logs at info;
    less what ``settings.without`` leaves out."""
    return {
        **clean_environment(),
        "DEALBASE_DATABASE_URL": database,
        **({} if "redis" in settings.without else {"DEALBASE_REDIS_URL": settings.redis_url}),
        "DEALBASE_LOG_FORMAT": "json",
        "DEALBASE_LOG_LEVEL": "warning" if "access-lines" in settings.without else "info",
        "DEALBASE_HOST": "127.0.0.1",
        "DEALBASE_PORT": str(port),
        "DEALBASE_DB_POOL_SIZE": str(settings.pool_size),
        "DEALBASE_RATE_LIMIT_KEY": GENEROUS_RATE,
        "DEALBASE_RATE_LIMIT_KEY_BURST": GENEROUS_BURST,
        "DEALBASE_RATE_LIMIT_TENANT": GENEROUS_RATE,
        "DEALBASE_RATE_LIMIT_TENANT_BURST": GENEROUS_BURST,
        # Python's own threshold, where `dealbase serve` would raise it.
        **({"DEALBASE_GC_YOUNG_THRESHOLD": "700"} if "gc-threshold" in settings.without else {}),
        **({"DEALBASE_ROUTE_SHORTCUTS": "false"} if "route-shortcuts" in settings.without else {}),
    }


def _answers_http(path: str) -> Callable[[httpx.Client], bool]:
    """Ready once the server answers `path` at all (the baseline answers 401 without a key)."""

    def probe(client: httpx.Client) -> bool:
        client.get(path)
        return True

    return probe


def start_dealbase(
    database: str,
    settings: BenchSettings,
    log_path: Path,
    extra_environment: dict[str, str] | None = None,
) -> tuple[Service, dict[str, str]]:
    port = free_port()
    environment = {**dealbase_environment(database, settings, port), **(extra_environment or {})}
    service = Service(
        "dealbase",
        [venv_tool("dealbase"), "serve", "--workers", str(settings.workers)],
        environment=environment,
        log_path=log_path,
        port=port,
        cwd=ROOT,
    )
    service.wait_ready(lambda client: client.get("/openapi.json").status_code == 200)
    shown = {k: v for k, v in environment.items() if k.startswith("DEALBASE_")}
    return service, shown


def start_baseline(database: str, settings: BenchSettings, log_path: Path) -> Service:
    port = free_port()
    service = Service(
        "baseline",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(BASELINES),
            "fastapi_psycopg:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(settings.workers),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        environment={
            **clean_environment(),
            "BASELINE_DATABASE_URL": database,
            "BASELINE_POOL_SIZE": str(settings.pool_size),
        },
        log_path=log_path,
        port=port,
        cwd=ROOT,
    )
    service.wait_ready(_answers_http(f"{REST_PREFIX}/customers"))
    return service


def start_postgraphile(
    database: str, schema: str, node: str, settings: BenchSettings, log_path: Path
) -> Service:
    port = free_port()
    service = Service(
        "postgraphile",
        [node, str(POSTGRAPHILE / "server.mjs")],
        environment={
            **node_environment(node),
            "DATABASE_URL": database,
            "SCHEMA": schema,
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "WORKERS": str(settings.workers),
            "POOL_SIZE": str(settings.pool_size),
        },
        log_path=log_path,
        port=port,
        cwd=POSTGRAPHILE,
    )
    service.wait_ready(
        lambda client: client.post("/graphql", json={"query": "{ __typename }"}).status_code == 200
    )
    return service


def server_versions(server: str, redis_url: str) -> dict[str, Any]:
    import redis

    with psycopg.connect(server) as connection:
        row = connection.execute("SHOW server_version").fetchone()
        settings: dict[str, str] = dict(
            connection.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections',"
                " 'shared_buffers', 'synchronous_commit', 'fsync', 'wal_level')"
            ).fetchall()
        )
    client = redis.Redis.from_url(redis_url)
    try:
        redis_version = client.info("server").get("redis_version")
    finally:
        client.close()
    return {
        "postgres_server": row[0] if row else None,
        "postgres_settings": settings,
        "redis_server": redis_version,
    }
