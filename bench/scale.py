"""Many tenants on one PostgreSQL: what provisioning, migrations and requests cost as they grow.

    make bench-scale                 # N=1000
    make bench-scale N=10000         # about 40 minutes on the 2-core machine
    .venv/bin/python bench/scale.py --tenants 300 --seconds 5

On a scratch database of its own (made and dropped as `make bench`'s is, tenant roles included):

1. Provisioning, in blocks of N/10 tenants, each tenant with a department and a key. In each
   block, the first tenants (a tenth of it, at least one) are created with no spare schema ready,
   so they run the schema's DDL; then spares for the rest are made one at a time, as a worker
   makes them; then the rest are created, each taking a spare. Each step is timed in this process
   (no CLI start-up): creating a tenant (with and without a spare) and making a spare, p50 and p95
   by block, so the trend from the first block to the last shows.
2. `dealbase migrate` with nothing pending (the CLI, timed whole, and less the start-up of
   `dealbase --help`), and `dealbase migrate --all`, which visits every schema.
3. An added tenant migration (a nullable column and an index on customers) over every schema
   and spare: the tenant tree is copied beside a revision of the bench's own, and the runner
   (`upgrade_tenants`, what `migrate` runs) pointed at the copy, at DEALBASE_MIGRATE_CONCURRENCY
   (default 4) tenants at a time.
4. POST /customers with wrk against `dealbase serve` (as `make bench` serves it), each request
   for a tenant picked at random among all N, beside the same load for one tenant, measured
   before and after it (their mean is the baseline). After each run, the resident anonymous
   memory (RssAnon: catalog and plan caches, not shared buffers) of the server's PostgreSQL
   backends, found by their application_name, read from /proc (the server must be local).
5. The catalog: relations, and the size of pg_catalog and of the database.

Prints one table and writes bench/results/scale-<date>.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.console import arguments_parser, sayer
from harness.figures import ms, percentiles
from harness.load import WrkLoad, run_wrk
from harness.paths import RESULTS
from harness.settings import BenchSettings
from harness.stack import (
    GENEROUS_BURST,
    GENEROUS_RATE,
    REST_PREFIX,
    dealbase_cli,
    drop_database,
    scratch_database,
    start_dealbase,
)
from harness.tools import close_results, ensure_wrk, results_header

from dealbase.config import parse_rate
from dealbase.db.database import Database
from dealbase.migrations import runner
from dealbase.ops import admin
from dealbase.tenancy.registry.spare_schemas import prepare_spare_schema
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import Rate

ADDED_REVISION = "t9001"
ADDED_MIGRATION = '''"""The bench's own: a nullable column and an index on customers (bench/scale.py)."""

from alembic import op
import sqlalchemy as sa

revision = "{revision}"
down_revision = "{down_revision}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("customers", sa.Column("bench_note", sa.Text()))
    op.create_index("customers_bench_note", "customers", ["bench_note"])
'''


say = sayer("scale")


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = call()
    return result, ms(time.perf_counter() - started)


def provision(
    database: Database, tenants: int, keys_file: Path, *, distributed: bool = False
) -> list[dict[str, Any]]:
    """Creates the tenants block by block; writes one "<key> <department>" line per tenant.
    ``distributed``: on a Citus cluster, every tenant (and spare) a distributed schema."""
    block_size = max(1, tenants // 10)
    rate = Rate(per_second=parse_rate(GENEROUS_RATE), burst=int(GENEROUS_BURST))
    blocks = []
    made = 0
    with keys_file.open("w") as keys:
        while made < tenants:
            size = min(block_size, tenants - made)
            without_spare = max(1, size // 10)
            created: list[float] = []
            created_without_spare: list[float] = []
            spares_made: list[float] = []

            def make_tenant(timings: list[float]) -> None:
                nonlocal made
                tenant, took = _timed(
                    lambda: create_tenant(database, f"scale-{made:06d}", distributed=distributed)
                )
                timings.append(took)
                department = admin.create_department(database, tenant.id, "Sales")
                key = admin.issue_key(database, tenant.id, department.id, "scale", rate)
                keys.write(f"{key.api_key} {department.id}\n")
                made += 1

            for _ in range(without_spare):
                make_tenant(created_without_spare)
            for _ in range(size - without_spare):
                _, took = _timed(
                    partial(prepare_spare_schema, database, size, distributed=distributed)
                )
                spares_made.append(took)
            for _ in range(size - without_spare):
                make_tenant(created)
            block: dict[str, Any] = {
                "tenants_before": made - size,
                "tenants_after": made,
                "create_with_spare_ms": percentiles(created, (0.5, 0.95)),
                "create_without_spare_ms": percentiles(created_without_spare, (0.5, 0.95)),
                "make_spare_ms": percentiles(spares_made, (0.5, 0.95)),
            }
            blocks.append(block)
            say(
                f"{made}/{tenants} tenants: create with a spare p50/p95"
                f" {block['create_with_spare_ms'].get('p50')}/"
                f"{block['create_with_spare_ms'].get('p95')} ms, without"
                f" {block['create_without_spare_ms'].get('p50')} ms, a spare"
                f" {block['make_spare_ms'].get('p50')}/{block['make_spare_ms'].get('p95')} ms"
            )
    return blocks


def migrate_figures(database_url: str, environment: dict[str, str] | None = None) -> dict[str, Any]:
    _, start_up = dealbase_cli(database_url, "--help", environment=environment)
    summary, no_op = dealbase_cli(database_url, "migrate", "--json", environment=environment)
    if summary is None or summary["visited"]:
        raise RuntimeError(f"migrate with nothing pending visited schemas: {summary}")
    every, every_seconds = dealbase_cli(
        database_url, "migrate", "--all", "--json", environment=environment
    )
    if every is None or every["failed"]:
        raise RuntimeError(f"migrate --all failed: {every}")
    return {
        "cli_start_up_s": round(start_up, 3),
        "no_op_s": round(no_op, 3),
        "no_op_less_start_up_s": round(no_op - start_up, 3),
        "all_s": round(every_seconds, 3),
        "all_visited": every["visited"],
    }


@contextmanager
def tenant_tree_with_added_revision() -> Iterator[None]:
    """Points the runner at a copy of the migration trees whose tenant tree has the bench's
    revision on top of the head, for as long as the block runs."""
    original = runner._TREES
    with tempfile.TemporaryDirectory(prefix="dealbase-scale-") as copy:
        trees = Path(copy)
        for tree in ("tenant", "control"):
            shutil.copytree(
                original / tree, trees / tree, ignore=shutil.ignore_patterns("__pycache__")
            )
        head = runner.head_revision("tenant")
        (trees / "tenant" / "versions" / f"{ADDED_REVISION}_bench.py").write_text(
            ADDED_MIGRATION.format(revision=ADDED_REVISION, down_revision=head)
        )
        caches = (runner.head_revision, runner._tenant_revision, runner.tenant_upgrade_script)
        runner._TREES = trees
        for cache in caches:
            cache.cache_clear()
        try:
            yield
        finally:
            runner._TREES = original
            for cache in caches:
                cache.cache_clear()


def added_migration(
    database: Database, concurrency: int, *, distributed: bool = False
) -> dict[str, Any]:
    with tenant_tree_with_added_revision():
        with database.control() as connection:
            schemas = runner.schemas_behind(connection)
        started = time.perf_counter()
        results = runner.upgrade_tenants(
            database.url, schemas, concurrency=concurrency, distributed=distributed
        )
        took = time.perf_counter() - started
    failed = [result for result in results if not result.ok]
    if failed:
        raise RuntimeError(f"the added migration failed in {len(failed)} schemas: {failed[0]}")
    return {
        "schemas": len(schemas),
        "concurrency": concurrency,
        "seconds": round(took, 2),
        "per_schema_ms": ms(took / max(1, len(schemas))),
    }


def backend_memory(database_url: str) -> dict[str, Any]:
    """RssAnon of the server's PostgreSQL backends (kB), from /proc: the server is local."""
    import psycopg

    with psycopg.connect(database_url) as connection:
        pids = [
            pid
            for (pid,) in connection.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'dealbase pid=%%'"
            )
        ]
    sizes = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("RssAnon:"):
                sizes.append(int(line.split()[1]))
    if not sizes:
        return {"backends": 0}
    return {
        "backends": len(sizes),
        "max_mb": round(max(sizes) / 1024, 1),
        "sum_mb": round(sum(sizes) / 1024, 1),
    }


def catalog(database_url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(database_url) as connection:
        counts = connection.execute(
            "SELECT (SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_attribute),"
            " (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
            "   JOIN pg_namespace n ON n.oid = c.relnamespace"
            "  WHERE n.nspname = 'pg_catalog' AND c.relkind = 'r'),"
            " pg_database_size(current_database())"
        ).fetchone()
        shown = connection.execute("SHOW shared_buffers").fetchone()
    if counts is None or shown is None:
        raise RuntimeError("the catalog query answered no row")
    relations, attributes, catalog_bytes, database_bytes = counts
    (shared_buffers,) = shown
    return {
        "pg_class_rows": relations,
        "pg_attribute_rows": attributes,
        "catalog_mb": round(int(catalog_bytes) / 2**20, 1),
        "database_mb": round(int(database_bytes) / 2**20, 1),
        "shared_buffers": shared_buffers,
    }


def units_of_work(base_url: str) -> dict[str, float]:
    """The server's units of work so far, warm and cold (its /metrics, summed over workers)."""
    counted = {"warm": 0.0, "cold": 0.0}
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dealbase_db_units_of_work_total":
                counted[sample.labels["connection"]] += sample.value
    return counted


def spread_throughput(
    database_url: str,
    settings: BenchSettings,
    keys_file: Path,
    stamp: str,
    *,
    steady_warmup: int | None,
    tenants_per_connection: int | None,
) -> dict[str, Any]:
    """One tenant, then spread over all (cold: the first seconds of a server, then steady: after
    a warm-up long enough for some three requests a tenant), then one tenant again."""
    wrk = ensure_wrk()
    one_tenant = keys_file.with_name("one-tenant-key.txt")
    one_tenant.write_text(keys_file.read_text().splitlines()[0] + "\n")
    tenants = len(keys_file.read_text().splitlines())
    runs: dict[str, Any] = {}
    environment = (
        {"DEALBASE_DB_TENANTS_PER_CONNECTION": str(tenants_per_connection)}
        if tenants_per_connection
        else {}
    )
    with ExitStack() as stack:
        service, shown = start_dealbase(
            database_url,
            settings,
            RESULTS / f"scale-{stamp}-logs" / "dealbase.log",
            environment,
        )
        stack.callback(service.stop)
        runs["server_settings"] = shown
        for label, keys in (
            ("one_tenant_before", one_tenant),
            ("spread_cold", keys_file),
            ("spread_steady", keys_file),
            ("one_tenant_after", one_tenant),
        ):
            load = WrkLoad(
                "post_customers_spread.lua",
                service.base_url,
                {"BENCH_KEYS_FILE": str(keys), "BENCH_PREFIX": REST_PREFIX},
            )
            warmup = settings.warmup_seconds
            if label == "spread_steady":
                cold_rate = runs["spread_cold"]["requests_per_second"]
                warmup = steady_warmup or min(900, max(warmup, round(3 * tenants / cold_rate)))
            if warmup:
                run_wrk(wrk, load, settings, warmup)
            before = units_of_work(service.base_url)
            measured = run_wrk(wrk, load, settings, settings.seconds)
            after = units_of_work(service.base_url)
            if measured.errors:
                raise RuntimeError(f"{label}: {measured.errors} errors: {measured.first_error}")
            warm, cold = (after[kind] - before[kind] for kind in ("warm", "cold"))
            runs[label] = {
                "warmup_s": warmup,
                "warm_share": round(warm / max(1.0, warm + cold), 3),
                "requests_per_second": round(measured.requests_per_second, 1),
                "p50_ms": measured.p50_ms,
                "p99_ms": measured.p99_ms,
                "backend_memory": backend_memory(database_url),
            }
            say(
                f"POST /customers, {label} (after {warmup} s of warm-up):"
                f" {runs[label]['requests_per_second']} requests/s,"
                f" {runs[label]['warm_share']:.0%} of them on a connection warm for the tenant"
            )
    baseline = statistics.mean(
        runs[label]["requests_per_second"] for label in ("one_tenant_before", "one_tenant_after")
    )
    for label in ("spread_cold", "spread_steady"):
        runs[f"{label}_ratio"] = round(runs[label]["requests_per_second"] / baseline, 3)
    return runs


def provisioning_report(figures: dict[str, Any]) -> list[str]:
    lines = ["provisioning (ms)        with a spare p50/p95   without p50/p95   a spare p50/p95"]
    for block in figures["provisioning"]:
        spare, plain, making = (
            block["create_with_spare_ms"],
            block["create_without_spare_ms"],
            block["make_spare_ms"],
        )
        lines.append(
            f"  tenants {block['tenants_before']:>5}-{block['tenants_after']:<5}"
            f"     {spare.get('p50', '-'):>7}/{spare.get('p95', '-'):<7}"
            f"      {plain.get('p50', '-'):>7}/{plain.get('p95', '-'):<7}"
            f"   {making.get('p50', '-'):>7}/{making.get('p95', '-'):<7}"
        )
    migrate = figures["migrate"]
    lines += [
        "",
        f"migrate, nothing pending: {migrate['no_op_s']} s"
        f" ({migrate['no_op_less_start_up_s']} s less the CLI's start-up of"
        f" {migrate['cli_start_up_s']} s); migrate --all: {migrate['all_s']} s"
        f" ({migrate['all_visited']} schemas)",
    ]
    added = figures["added_migration"]
    lines.append(
        f"added migration: {added['seconds']} s over {added['schemas']} schemas"
        f" ({added['per_schema_ms']} ms a schema, {added['concurrency']} at a time)"
    )
    return lines


def report(figures: dict[str, Any]) -> str:
    lines = [f"{figures['tenants']} tenants on one PostgreSQL ({figures['started_at']})", ""]
    if "provisioning" in figures:
        lines += provisioning_report(figures)
    spread = figures.get("spread")
    if spread:
        lines += [
            "",
            "POST /customers              requests/s   p50 ms   p99 ms   warm   backends' RssAnon max/sum MB",
        ]
        for label in ("one_tenant_before", "spread_cold", "spread_steady", "one_tenant_after"):
            run = spread[label]
            memory = run["backend_memory"]
            lines.append(
                f"  {label:<25}  {run['requests_per_second']:>9}   {run['p50_ms']:>6}   {run['p99_ms']:>6}"
                f"   {run['warm_share']:>4.0%}"
                f"   {memory.get('max_mb', '-')}/{memory.get('sum_mb', '-')} ({memory.get('backends')} backends)"
            )
        lines.append(
            f"  spread / one tenant: cold {spread['spread_cold_ratio']},"
            f" steady (after {spread['spread_steady']['warmup_s']} s) {spread['spread_steady_ratio']}"
        )
    cat = figures["catalog"]
    lines += [
        "",
        f"catalog: {cat['pg_class_rows']} relations, {cat['pg_attribute_rows']} attributes,"
        f" pg_catalog {cat['catalog_mb']} MB, database {cat['database_mb']} MB;"
        f" shared_buffers {cat['shared_buffers']}",
    ]
    return "\n".join(lines)


def provisioned_figures(
    url: str, arguments: argparse.Namespace, concurrency: int, keys_file: Path
) -> dict[str, Any]:
    """Provisioning, `migrate` and the added migration on the new database."""
    dealbase_cli(url, "migrate", "--json")
    database = Database(url, pool_size=2)
    figures: dict[str, Any] = {}
    try:
        figures["provisioning"] = provision(database, arguments.tenants, keys_file)
        figures["migrate"] = migrate_figures(url)
        say(f"migrate: {figures['migrate']}")
        figures["added_migration"] = added_migration(database, concurrency)
        say(f"added migration: {figures['added_migration']}")
    finally:
        database.dispose()
    return figures


def main() -> int:
    parser = arguments_parser(__doc__)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--seconds", type=int, help="of each wrk run (default BENCH_SECONDS)")
    parser.add_argument("--no-http", action="store_true", help="skip the POST /customers part")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the database, its roles and the keys (bench/results/scale-<date>-keys.txt)",
    )
    parser.add_argument(
        "--reuse",
        metavar="URL",
        help="only the POST /customers part and the catalog, on a database a --keep run left",
    )
    parser.add_argument("--keys", type=Path, help="with --reuse: the keys file of that run")
    parser.add_argument(
        "--drop", metavar="URL", help="drop a database a --keep run left, and its roles"
    )
    parser.add_argument(
        "--steady-warmup",
        type=int,
        metavar="SECONDS",
        help="of spread load before the steady run (default: some three requests a tenant)",
    )
    parser.add_argument(
        "--tenants-per-connection",
        type=int,
        metavar="N",
        help="the server's DEALBASE_DB_TENANTS_PER_CONNECTION (default: the server's default)",
    )
    arguments = parser.parse_args()
    if bool(arguments.reuse) != bool(arguments.keys):
        parser.error("--reuse and --keys go together")
    settings = BenchSettings.from_environment()
    if arguments.drop:
        drop_database(settings.database_server, arguments.drop)
        say(f"dropped {arguments.drop.rpartition('/')[2]}")
        return 0
    if arguments.seconds:
        settings = replace(settings, seconds=arguments.seconds)
    concurrency = int(os.environ.get("DEALBASE_MIGRATE_CONCURRENCY", "4"))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    figures = results_header(stamp, tenants=arguments.tenants)
    spread_options: dict[str, Any] = {
        "steady_warmup": arguments.steady_warmup,
        "tenants_per_connection": arguments.tenants_per_connection,
    }
    RESULTS.mkdir(exist_ok=True)
    if arguments.reuse:
        figures["reused_database"] = arguments.reuse.rpartition("/")[2]
        keys_file = arguments.keys.resolve()
        figures["tenants"] = len(keys_file.read_text().splitlines())
        figures["spread"] = spread_throughput(
            arguments.reuse, settings, keys_file, stamp, **spread_options
        )
        figures["catalog"] = catalog(arguments.reuse)
    else:
        with (
            scratch_database(settings.database_server, keep=arguments.keep) as url,
            tempfile.TemporaryDirectory() as work,
        ):
            say(f"scratch database {url.rpartition('/')[2]}")
            keys_file = (
                RESULTS / f"scale-{stamp}-keys.txt" if arguments.keep else Path(work) / "keys.txt"
            )
            figures.update(provisioned_figures(url, arguments, concurrency, keys_file))
            if not arguments.no_http:
                figures["spread"] = spread_throughput(
                    url, settings, keys_file, stamp, **spread_options
                )
            figures["catalog"] = catalog(url)
            if arguments.keep:
                say(f"kept: --reuse {url} --keys {keys_file}")
    close_results("scale", stamp, figures, report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
