"""Many tenants on the Citus cluster: bench/scale.py's parts 1-3, and a rebalance under writes.

    make bench-citus-scale                       # N=1000
    .venv/bin/python bench/citus_scale.py --tenants 30 --crowded 20 --seconds 5   # quick look

In a database of its own on the cluster at DEALBASE_BENCH_CITUS_URL (--citus-url): created on
the coordinator and every worker, with the extension, the coordinator named and the workers
added, and dropped at the end on every node with its tenant roles. A rebalance in it moves
nothing of another database's. Every tenant is a distributed schema; every `dealbase` process
runs with DEALBASE_CITUS_SCHEMA_SHARDING=true.

1-3. As bench/scale.py: provisioning in blocks with and without spare schemas, `dealbase
   migrate` with nothing pending and `--all`, the bench's added tenant migration over every
   schema (Citus propagates each DDL to the schema's worker).
4. Rebalance: CROWDED more tenants made while the last worker takes no new shards
   (citus_set_node_property shouldhaveshards=false), so they all land on the first; then the
   node takes shards again. `dealbase serve`, and WRITERS clients creating customers one after
   another, each going round its own tenants (half of them crowded, half among the N, on both
   workers), every answer kept; BENCH_SECONDS of writes, `dealbase tenant rebalance`, then
   BENCH_SECONDS more. Checked: every answer 201 (503 with Retry-After allowed and counted), every
   customer answered 201 in its tenant's table. Reported: the rebalance's seconds and moves, the
   tenants whose node changed (by pg_dist_placement before and after), writes a second and
   latency before, during and after.

Prints the figures and writes bench/results/citus-scale-<date>.json. Exit 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale
from harness.paths import RESULTS
from harness.settings import BenchSettings
from harness.stack import GENEROUS_BURST, GENEROUS_RATE, REST_PREFIX, start_dealbase
from harness.tools import git_state, load_average, machine

from dealbase.config import parse_rate
from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import Rate

DEFAULT_CITUS = "postgresql://postgres@127.0.0.1:9700/dealbase"
WRITERS = 4
TENANTS_PER_WRITER = 4
TENANTS_PER_CONNECTION = 50
# Spares made by the bench only, so that the figures see only what it makes.
ENVIRONMENT = {
    "DEALBASE_CITUS_SCHEMA_SHARDING": "true",
    "DEALBASE_SPARE_TENANT_SCHEMAS": "0",
    "DEALBASE_LOG_LEVEL": "warning",
}
PLACEMENTS = """
SELECT s.schemaid::regnamespace::text, min(n.nodename || ':' || n.nodeport)
  FROM pg_dist_schema s
  JOIN pg_dist_partition p ON p.colocationid = s.colocationid
  JOIN pg_dist_shard d ON d.logicalrelid = p.logicalrelid
  JOIN pg_dist_placement l ON l.shardid = d.shardid
  JOIN pg_dist_node n ON n.groupid = l.groupid
 GROUP BY 1
"""


def say(message: str) -> None:
    print(f"citus-scale: {message}", flush=True)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _url_of(url: str, host: str, port: int, database: str) -> str:
    scheme, _, rest = url.partition("://")
    credentials, _, _ = rest.rpartition("@")
    return f"{scheme}://{credentials}{'@' if credentials else ''}{host}:{port}/{database}"


@contextmanager
def own_cluster_database(citus_url: str) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """A Citus database of the bench's own on every node (tests/citus/conftest.py's way); its
    URL on the coordinator and the workers. Dropped afterwards with its tenant roles."""
    name = f"dealbase_bench_scale_{secrets.token_hex(4)}"
    with psycopg.connect(citus_url) as connection:
        coordinator = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0"
        ).fetchone()
        workers = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node"
            " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
        ).fetchall()
    if coordinator is None:
        raise RuntimeError(f"{citus_url}: no coordinator in pg_dist_node")
    nodes = [(str(host), int(port)) for host, port in [coordinator, *workers]]
    made = []
    try:
        for host, port in nodes:
            with psycopg.connect(_url_of(citus_url, host, port, "postgres"), autocommit=True) as c:
                c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            made.append((host, port))
            with psycopg.connect(_url_of(citus_url, host, port, name), autocommit=True) as c:
                c.execute("CREATE EXTENSION citus")
        url = _url_of(citus_url, *nodes[0], name)
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("SELECT citus_set_coordinator_host(%s, %s)", nodes[0])
            for worker in nodes[1:]:
                connection.execute("SELECT citus_add_node(%s, %s)", worker)
        yield url, nodes[1:]
    finally:
        roles: list[str] = []
        if made:
            with psycopg.connect(_url_of(citus_url, *nodes[0], name)) as connection:
                roles = (
                    [
                        role
                        for (role,) in connection.execute(
                            "SELECT rolname FROM pg_roles WHERE rolname ~ '^t_[0-9a-f]{32}$'"
                            " AND rolname IN (SELECT nspname FROM pg_namespace"
                            "   UNION SELECT schema_name FROM control.tenants)"
                        )
                    ]
                    if _has_control(connection)
                    else []
                )
        for host, port in made:
            with psycopg.connect(_url_of(citus_url, host, port, "postgres"), autocommit=True) as c:
                c.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
                # Citus made each tenant role on every node; the database's objects are gone.
                for role in roles:
                    c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        say(f"dropped {name} on {len(made)} nodes, and {len(roles)} tenant roles")


def _has_control(connection: psycopg.Connection[Any]) -> bool:
    row = connection.execute("SELECT to_regclass('control.tenants') IS NOT NULL").fetchone()
    return bool(row and row[0])


def placements(url: str) -> dict[str, str]:
    """Each distributed schema's node (all of a schema's shards are placed together)."""
    with psycopg.connect(url) as connection:
        return {str(schema): str(node) for schema, node in connection.execute(PLACEMENTS)}


@dataclass(frozen=True)
class Answer:
    writer: int
    schema: str
    started: float
    ended: float
    status: int
    customer_id: str | None
    retry_after: str | None
    text: str


@dataclass(frozen=True)
class WriterTenant:
    schema: str
    api_key: str
    department_id: str


class Writers:
    """WRITERS clients creating customers one after another, each going round its tenants."""

    def __init__(self, base_url: str, tenants: list[list[WriterTenant]]) -> None:
        self.base_url = base_url
        self.tenants = tenants
        self.stop = threading.Event()
        self.answers: list[Answer] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._write, args=(n,), daemon=True) for n in range(WRITERS)
        ]

    def _write(self, writer: int) -> None:
        with httpx.Client(base_url=self.base_url, timeout=120) as client:
            sequence = 0
            while not self.stop.is_set():
                tenant = self.tenants[writer][sequence % len(self.tenants[writer])]
                sequence += 1
                started = time.monotonic()
                try:
                    response = client.post(
                        f"{REST_PREFIX}/customers",
                        json={"last_name": f"rebalance-w{writer}-{sequence:07d}"},
                        headers={
                            "X-Api-Key": tenant.api_key,
                            "X-Department-Id": tenant.department_id,
                        },
                    )
                except httpx.HTTPError as exc:
                    answer = Answer(
                        writer, tenant.schema, started, time.monotonic(), 0, None, None, repr(exc)
                    )
                else:
                    ok = response.status_code == 201
                    answer = Answer(
                        writer,
                        tenant.schema,
                        started,
                        time.monotonic(),
                        response.status_code,
                        response.json()["id"] if ok else None,
                        response.headers.get("retry-after"),
                        "" if ok else response.text[:300],
                    )
                with self.lock:
                    self.answers.append(answer)

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=150)


def _window(answers: list[Answer], start: float, end: float) -> dict[str, Any]:
    inside = [a for a in answers if start <= a.ended < end]
    latencies = sorted(_ms(a.ended - a.started) for a in inside)
    created = sum(a.status == 201 for a in inside)
    figures: dict[str, Any] = {
        "seconds": round(end - start, 2),
        "answers": len(inside),
        "writes_per_second": round(created / (end - start), 1) if end > start else None,
    }
    if latencies:
        figures.update(
            p50_ms=latencies[len(latencies) // 2],
            p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            max_ms=latencies[-1],
        )
    return figures


def _node_shards(url: str, node: tuple[str, int], take: bool) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', %s)", (*node, take)
        )


def _writer_tenant(database: Database, name: str) -> WriterTenant:
    tenant = create_tenant(database, name, distributed=True)
    department = admin.create_department(database, tenant.id, "Sales")
    key = admin.issue_key(database, tenant.id, department.id, "scale", scale_rate())
    return WriterTenant(tenant.schema, key.api_key, str(department.id))


def scale_rate() -> Rate:
    return Rate(per_second=parse_rate(GENEROUS_RATE), burst=int(GENEROUS_BURST))


def rebalance_part(
    url: str,
    workers: list[tuple[str, int]],
    database: Database,
    settings: BenchSettings,
    crowded: int,
    logs: Path,
) -> dict[str, Any]:
    figures: dict[str, Any] = {"crowded": crowded, "writers": WRITERS}
    failures: list[str] = []
    first, last = f"{workers[0][0]}:{workers[0][1]}", f"{workers[-1][0]}:{workers[-1][1]}"
    before = placements(url)
    # Writers' tenants among the N: as many on each worker.
    on_first, on_last = (
        [s for s, n in sorted(before.items()) if n == node] for node in (first, last)
    )
    spread = [schema for pair in zip(on_first, on_last, strict=False) for schema in pair]
    say(f"rebalance: {crowded} tenants made while {last} takes no new shards")
    _node_shards(url, workers[-1], False)
    try:
        crowd = [_writer_tenant(database, f"crowded-{i:05d}") for i in range(crowded)]
    finally:
        _node_shards(url, workers[-1], True)
    # The N tenants' keys are not kept: a department and key of the writers' own in each.
    spread_tenants = []
    with database.control() as connection:
        ids: dict[str, Any] = dict(
            connection.exec_driver_sql("SELECT schema_name, id FROM control.tenants").all()
        )
    for schema in spread[: WRITERS * (TENANTS_PER_WRITER - TENANTS_PER_WRITER // 2)]:
        department = admin.create_department(database, ids[schema], "Rebalance")
        key = admin.issue_key(database, ids[schema], department.id, "rebalance", scale_rate())
        spread_tenants.append(WriterTenant(schema, key.api_key, str(department.id)))
    # Each writer: half crowded tenants (on the first worker, some to move), half spread.
    half = TENANTS_PER_WRITER // 2
    rounds = [
        crowd[w * half : (w + 1) * half] + spread_tenants[w * half : (w + 1) * half]
        for w in range(WRITERS)
    ]
    placed = placements(url)
    figures["placement_before"] = dict(Counter(placed.values()).most_common())
    say(f"rebalance: placement before {figures['placement_before']}")
    service, _ = start_dealbase(url, settings, logs / "dealbase.log", ENVIRONMENT)
    try:
        with Writers(service.base_url, rounds) as writers:
            time.sleep(1)  # the writers' first requests (connections, a warm server)
            before_start = time.monotonic()
            time.sleep(settings.seconds)
            say("rebalance: `dealbase tenant rebalance` under writes")
            rebalance_start = time.monotonic()
            answer, took = scale.dealbase_cli(
                url, "tenant", "rebalance", "--json", environment=ENVIRONMENT
            )
            rebalance_end = time.monotonic()
            time.sleep(settings.seconds)
            after_end = time.monotonic()
    finally:
        service.stop()
    after = placements(url)
    moved = [schema for schema, node in after.items() if placed.get(schema) != node]
    answers = sorted(writers.answers, key=lambda a: a.ended)
    writer_schemas = {t.schema for r in rounds for t in r}
    figures.update(
        rebalance_command_seconds=round(took, 2),
        moves=(answer or {}).get("moves"),
        tenants_moved=len(moved),
        writers_tenants_moved=len(writer_schemas & set(moved)),
        writers_tenants=len(writer_schemas),
        placement_after=dict(Counter(after.values()).most_common()),
        before=_window(answers, before_start, rebalance_start),
        during=_window(answers, rebalance_start, rebalance_end),
        after=_window(answers, rebalance_end, after_end),
    )
    statuses = Counter(a.status for a in answers)
    figures["statuses"] = {str(k): v for k, v in sorted(statuses.items())}
    refused = [a for a in answers if a.status == 503 and a.retry_after]
    unexpected = [a for a in answers if a.status != 201 and a not in refused]
    figures["refused_503_with_retry_after"] = len(refused)
    figures["unexpected_answers"] = len(unexpected)
    if unexpected:
        failures.append(
            f"{len(unexpected)} answers neither 201 nor 503 with Retry-After, the first:"
            f" {unexpected[0].status} {unexpected[0].text}"
        )
    answered = {(a.schema, a.customer_id) for a in answers if a.customer_id}
    stored: set[tuple[str, str | None]] = set()
    with psycopg.connect(url) as connection:
        for schema in sorted(writer_schemas):
            stored |= {
                (schema, row[0])
                for row in connection.execute(
                    sql.SQL("SELECT id::text FROM {} WHERE last_name LIKE 'rebalance-%'").format(
                        sql.Identifier(schema, "customers")
                    )
                )
            }
    figures["rows_answered_201"] = len(answered)
    figures["rows_lost"] = len(answered - stored)
    figures["rows_without_a_201"] = len(stored - answered)
    if answered - stored:
        failures.append(f"{len(answered - stored)} rows answered 201 are not in the table")
    figures["failures"] = failures
    say(f"rebalance: {json.dumps(figures)}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument(
        "--crowded",
        type=int,
        default=300,
        help="tenants made on the first worker alone before the rebalance (default 300)",
    )
    parser.add_argument("--seconds", type=int, help="of writes before and after the rebalance")
    parser.add_argument(
        "--citus-url", default=os.environ.get("DEALBASE_BENCH_CITUS_URL", DEFAULT_CITUS)
    )
    parser.add_argument("--no-rebalance", action="store_true", help="parts 1-3 only")
    arguments = parser.parse_args()
    settings = BenchSettings.from_environment()
    if arguments.seconds:
        settings = replace(settings, seconds=arguments.seconds)
    concurrency = int(os.environ.get("DEALBASE_MIGRATE_CONCURRENCY", "4"))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    figures: dict[str, Any] = {
        "tenants": arguments.tenants,
        "started_at": stamp,
        "machine": machine(),
        "git": git_state(),
        "load_average_before": load_average(),
    }
    RESULTS.mkdir(exist_ok=True)
    logs = RESULTS / f"citus-scale-{stamp}-logs"
    logs.mkdir(exist_ok=True)
    failed: list[str] = []
    with (
        own_cluster_database(arguments.citus_url) as (url, workers),
        tempfile.TemporaryDirectory() as work,
    ):
        say(f"database {url.rpartition('/')[2]} on the coordinator and {len(workers)} workers")
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT citus_version()").fetchone()
        figures["citus"] = row[0] if row else None
        _, seconds = scale.dealbase_cli(url, "migrate", "--json", environment=ENVIRONMENT)
        figures["migrate_fresh_s"] = round(seconds, 2)
        # Citus keeps, in each coordinator session, a connection to the worker for every role
        # the session used (citus.max_cached_conns_per_worker is per user): a session working
        # as hundreds of tenant roles fills the workers' max_connections. Retired sooner here.
        database = Database(
            url,
            pool_size=2,
            distributed_schemas=True,
            tenants_per_connection=TENANTS_PER_CONNECTION,
        )
        try:
            figures["provisioning"] = scale.provision(
                database, arguments.tenants, Path(work) / "keys.txt", distributed=True
            )
            figures["placement"] = dict(Counter(placements(url).values()).most_common())
            say(f"placement: {figures['placement']}")
            figures["load_average_after_provisioning"] = load_average()
            figures["migrate"] = scale.migrate_figures(url, ENVIRONMENT)
            say(f"migrate: {figures['migrate']}")
            figures["added_migration"] = scale.added_migration(
                database, concurrency, distributed=True
            )
            say(f"added migration: {figures['added_migration']}")
            figures["load_average_after_migrations"] = load_average()
            if not arguments.no_rebalance:
                figures["rebalance"] = rebalance_part(
                    url, workers, database, settings, arguments.crowded, logs
                )
                failed += figures["rebalance"]["failures"]
            figures["catalog_coordinator"] = scale.catalog(url)
        finally:
            database.dispose()
    figures["load_average_after"] = load_average()
    path = RESULTS / f"citus-scale-{stamp}.json"
    path.write_text(json.dumps(figures, indent=2))
    print()
    print("\n".join(scale.provisioning_report(figures)))
    print(f"\nfigures: {path}")
    if failed:
        print("FAILED: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
