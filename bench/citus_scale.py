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

import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale
from harness.cluster import DEFAULT_CITUS, generous_rate, own_cluster_database
from harness.console import arguments_parser, sayer
from harness.paths import RESULTS
from harness.settings import BenchSettings
from harness.stack import dealbase_cli, start_dealbase
from harness.tools import close_results, load_average, results_header
from harness.writers import WRITERS, Writers, WriterTenant, checked, window

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.tenancy.registry.tenants import create_tenant

say = sayer("citus-scale")
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


def placements(url: str) -> dict[str, str]:
    """Each distributed schema's node (all of a schema's shards are placed together)."""
    with psycopg.connect(url) as connection:
        return {str(schema): str(node) for schema, node in connection.execute(PLACEMENTS)}


def _node_shards(url: str, node: tuple[str, int], take: bool) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', %s)", (*node, take)
        )


def _writer_tenant(database: Database, name: str) -> WriterTenant:
    tenant = create_tenant(database, name, distributed=True)
    department = admin.create_department(database, tenant.id, "Sales")
    key = admin.issue_key(database, tenant.id, department.id, "scale", generous_rate())
    return WriterTenant(tenant.schema, key.api_key, str(department.id))


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
        key = admin.issue_key(database, ids[schema], department.id, "rebalance", generous_rate())
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
        with Writers(service.base_url, rounds, "rebalance") as writers:
            time.sleep(1)  # the writers' first requests (connections, a warm server)
            before_start = time.monotonic()
            time.sleep(settings.seconds)
            say("rebalance: `dealbase tenant rebalance` under writes")
            rebalance_start = time.monotonic()
            answer, took = dealbase_cli(
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
        before=window(answers, before_start, rebalance_start),
        during=window(answers, rebalance_start, rebalance_end),
        after=window(answers, rebalance_end, after_end),
    )
    answers_figures, answers_failures, _ = checked(answers, url, "rebalance")
    figures.update(answers_figures)
    failures += answers_failures
    figures["failures"] = failures
    say(f"rebalance: {json.dumps(figures)}")
    return figures


def main() -> int:
    parser = arguments_parser(__doc__)
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
    figures = results_header(stamp, tenants=arguments.tenants)
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
        _, seconds = dealbase_cli(url, "migrate", "--json", environment=ENVIRONMENT)
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
    close_results("citus-scale", stamp, figures, "\n".join(scale.provisioning_report(figures)))
    if failed:
        print("FAILED: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
