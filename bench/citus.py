"""dealbase on a Citus cluster beside the single PostgreSQL server, measured in one run.

    make bench-citus                                  # 20 tenants, 10 s a load, 3 rounds
    .venv/bin/python bench/citus.py --tenants 5 --rounds 1 --move-customers 2000   # quick look
    .venv/bin/python bench/citus.py --parts move      # one part: provisioning, requests, move

Two places, each its own `dealbase`: the single server (a scratch database on
DEALBASE_BENCH_DATABASE_URL, made and dropped as `make bench`'s is) and the cluster (the
coordinator at DEALBASE_BENCH_CITUS_URL, its database as it is: the run makes fresh tenants
there, every one a distributed schema (DEALBASE_CITUS_SCHEMA_SHARDING=true), deletes them at the
end, and never drops the database). Three parts:

1. provisioning: `dealbase migrate` (the CLI, timed whole: on the single server a fresh
   database, then again with nothing pending; on the cluster with nothing pending, over the
   tenants it holds already), then N tenants created one after another in this process, each
   with no spare schema ready (its DDL runs in the creation), then a department and a key; then
   SPARES spare schemas made as a worker makes them, and as many tenants created, each taking
   one. Seconds per tenant, p50 and p95, and where the cluster placed its tenants.
2. requests: on each, a tenant seeded through the REST API as `make bench` seeds it (60 deals
   with 3 customers each, moved to a step and assigned; customers up to 1000; 2 activities for
   each of the first 100 customers; the deals made by `PUT /deals/by-external-id/{id}`, their
   customers linked by `POST /deals/{id}/customers`), served by `dealbase serve` with
   BENCH_WORKERS processes as `make bench` serves it. Then `POST /customers` in one department
   (bench/wrk/post_customers.lua) and the GraphQL dashboard (bench/wrk/graphql.lua,
   queries/dashboard.graphql, first 50), wrk -t BENCH_THREADS -c BENCH_CONNECTIONS, a warm-up
   then BENCH_SECONDS, on the single server and on the cluster alternately (ROUNDS rounds, the
   order turned round each round); each figure the cluster's over the single server's. Beside
   them the same insert's transaction without dealbase (bench/pgbench/unit_of_work_as_tenant.sql,
   BENCH_WORKERS x BENCH_POOL_SIZE clients): what the cluster costs the SQL itself. For each
   run, the CPU a request took in each process tree (dealbase's server, each PostgreSQL server:
   the single one, or the coordinator and each worker) and on the whole machine, from /proc.
3. move: on the cluster, a tenant holding MOVE_CUSTOMERS customers (`POST /customers/batch`,
   1,000 a batch), an ordered webhook endpoint for customer.created pointing at the receiver of
   bench/webhooks.py, `dealbase worker` delivering, and WRITERS clients creating customers one
   after another, every answer kept; BENCH_SECONDS of writes, then `dealbase tenant move
   TENANT --node <the other worker>` (mode auto), then BENCH_SECONDS more. Writes a second,
   p50, p99 and max latency before, during and after the move (by each answer's arrival); the
   answers that are not 201 (only 503 with Retry-After is allowed); rows lost (a 201's customer
   not in the table) and rows without a 201; deliveries lost, sent twice, or out of each
   writer's order; the source worker's CPU a second, before and during the move command.

--worker-reads serves the cluster's reads (REST reads, GraphQL queries) on the tenant's worker
(DEALBASE_CITUS_READS_ON_WORKERS=true), writes still through the coordinator.

Anything not as it must be (an error answer, a row lost, a delivery lost or doubled, a failed
load) fails the run: FAILED in the table, exit 1. Prints tables and writes
bench/results/citus-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import seed as seeding
from harness.cluster import (
    CLUSTER,
    DEFAULT_CITUS,
    SINGLE,
    Made,
    Place,
    Served,
    cluster_versions,
    delete_tenants,
    generous_rate,
    places,
    postmasters,
    say,
    serve,
)
from harness.console import arguments_parser
from harness.figures import ms, percentiles
from harness.load import LoadFailed, Measurement, PgbenchLoad, WrkLoad, run_pgbench, run_wrk
from harness.paths import QUERIES, RESULTS, ROOT
from harness.proc import machine_busy_seconds, tree_cpu_seconds
from harness.processes import ServiceFailed, stop_on_sigterm
from harness.settings import BenchSettings, SettingsError
from harness.stack import REST_PREFIX, analyze, server_versions
from harness.tenant_move import move_part
from harness.tools import ensure_pgbench, ensure_wrk, git_state, load_average, machine
from harness.writers import WRITERS

from dealbase.ops import admin
from dealbase.tenancy.registry.placement import tenant_node
from dealbase.tenancy.registry.spare_schemas import prepare_spare_schema
from dealbase.tenancy.registry.tenants import create_tenant

SPARES = 5


# --- 1. provisioning ------------------------------------------------------------------------------


def _spares(place: Place) -> set[str]:
    with place.database.control() as connection:
        rows = connection.exec_driver_sql("SELECT schema_name FROM control.spare_schemas").all()
    return {row[0] for row in rows}


def _tenant_count(place: Place) -> int:
    with place.database.control() as connection:
        row = connection.exec_driver_sql(
            "SELECT count(*) FROM control.tenants WHERE deleted_at IS NULL"
        ).one()
    return int(row[0])


def provisioning(place: Place, made: Made, tenants: int, *, fresh: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    if fresh:
        _, seconds = place.cli("migrate")
        figures["migrate_fresh_s"] = round(seconds, 2)
        say(f"{place.name}: migrate of a fresh database {seconds:.2f} s")
    figures["tenants_before"] = _tenant_count(place)
    _, seconds = place.cli("migrate")
    figures["migrate_nothing_pending_s"] = round(seconds, 2)
    say(
        f"{place.name}: migrate with nothing pending ({figures['tenants_before']} tenants)"
        f" {seconds:.2f} s"
    )
    created, with_key, took_spare = [], [], 0
    schemas = []
    stamp = datetime.now(UTC).strftime("%H%M%S")
    for index in range(tenants):
        ready = _spares(place)
        started = time.perf_counter()
        tenant = create_tenant(
            place.database, f"citus-bench-{stamp}-{index:03d}", distributed=place.distributed
        )
        created.append(ms(time.perf_counter() - started))
        if place.distributed:
            made.tenants.append(tenant.id)
        took_spare += tenant.schema in ready
        department = admin.create_department(place.database, tenant.id, "Sales")
        admin.issue_key(place.database, tenant.id, department.id, "bench", generous_rate())
        with_key.append(ms(time.perf_counter() - started))
        schemas.append(tenant.schema)
    figures["create_without_spare_ms"] = percentiles(created)
    figures["create_with_department_and_key_ms"] = percentiles(with_key)
    figures["created_taking_a_spare_anyway"] = took_spare
    spare_made, spare_taken, taken = [], [], 0
    for index in range(SPARES):
        started = time.perf_counter()
        schema = prepare_spare_schema(place.database, 1000, distributed=place.distributed)
        spare_made.append(ms(time.perf_counter() - started))
        started = time.perf_counter()
        tenant = create_tenant(
            place.database, f"citus-bench-{stamp}-spare-{index:03d}", distributed=place.distributed
        )
        spare_taken.append(ms(time.perf_counter() - started))
        if place.distributed:
            made.tenants.append(tenant.id)
        taken += tenant.schema == schema
        schemas.append(tenant.schema)
    figures["spare_made_ms"] = percentiles(spare_made)
    figures["create_taking_a_spare_ms"] = percentiles(spare_taken)
    figures["spares_taken_by_these_tenants"] = taken
    if place.distributed:
        figures["placement"] = dict(
            Counter(str(tenant_node(place.url, schema)) for schema in schemas).most_common()
        )
    say(
        f"{place.name}: {tenants} tenants without a spare, p50 {created and statistics.median(created):.0f} ms"
        f" (with department and key {statistics.median(with_key):.0f} ms);"
        f" {SPARES} spares made p50 {statistics.median(spare_made):.0f} ms, a tenant taking one"
        f" p50 {statistics.median(spare_taken):.1f} ms"
    )
    return figures


# --- 2. requests ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    name: str
    script: str
    what: str
    tool: str = "wrk"  # or pgbench, with a script of bench/pgbench


LOADS = (
    Load("post_customers", "post_customers.lua", "POST /customers, one department"),
    # The same insert's transaction without dealbase: what the cluster costs the SQL itself.
    Load(
        "pgbench_unit_of_work",
        "unit_of_work_as_tenant.sql",
        "pgbench: POST /customers' insert as the tenant's role, BEGIN to COMMIT",
        "pgbench",
    ),
    Load(
        "graphql_dashboard", "graphql.lua", "GraphQL dashboard: 50 deals, step, employee, customers"
    ),
)


def _wrk_load(load: Load, served: Served) -> WrkLoad:
    environment = {
        "BENCH_API_KEY": served.tenant.api_key,
        "BENCH_DEPARTMENT_ID": served.tenant.department_id,
        "BENCH_PREFIX": REST_PREFIX,
    }
    if load.script == "graphql.lua":
        environment["BENCH_QUERY_FILE"] = str(QUERIES / "dashboard.graphql")
        environment["BENCH_VARIABLES"] = '{"first": 50}'
    return WrkLoad(load.script, served.service.base_url, environment)


def measure_load(
    tools: dict[str, str],
    load: Load,
    served: Served,
    settings: BenchSettings,
    nodes: dict[str, int],
) -> dict[str, Any]:
    analyze(served.place.url, served.tenant.schema)
    run: Callable[[int], Measurement]
    if load.tool == "pgbench":
        tenant = served.tenant
        pgbench_load = PgbenchLoad(
            served.place.url,
            tenant.schema,
            tenant.key_id,
            tenant.department_id,
            clients=settings.workers * settings.pool_size,
            script=load.script,
            protocol="simple",
        )
        run = partial(run_pgbench, tools["pgbench"], pgbench_load, settings)
    else:
        run = partial(run_wrk, tools["wrk"], _wrk_load(load, served), settings)
    record: dict[str, Any] = {"load_average_before": load_average()}
    trees = {"dealbase": served.service.pid, **nodes}
    try:
        if settings.warmup_seconds:
            warm = run(settings.warmup_seconds)
            if warm.errors:
                record["failure"] = f"{warm.errors} errors in the warm-up: {warm.first_error}"
                return record
        cpu_before = {name: tree_cpu_seconds(pid) for name, pid in trees.items()}
        busy_before = machine_busy_seconds()
        measured = run(settings.seconds)
        busy = machine_busy_seconds() - busy_before
        if measured.requests:
            record["cpu_ms_per_request"] = {
                name: round(
                    (tree_cpu_seconds(pid) - cpu_before[name]) * 1000 / measured.requests, 2
                )
                for name, pid in trees.items()
            }
            record["cpu_ms_per_request"]["machine"] = round(busy * 1000 / measured.requests, 2)
    except LoadFailed as exc:
        record["failure"] = str(exc)
        return record
    finally:
        record["load_average_after"] = load_average()
    record.update(
        requests=measured.requests,
        requests_per_second=round(measured.requests_per_second, 1),
        p50_ms=measured.p50_ms,
        p99_ms=measured.p99_ms,
        max_ms=measured.max_ms,
        errors=measured.errors,
    )
    if measured.errors:
        record["failure"] = (
            f"{measured.errors} errors: {measured.error_detail}: {measured.first_error}"
        )
    elif not measured.requests:
        record["failure"] = "no request completed"
    return record


def requests_part(
    tools: dict[str, str], served: dict[str, Served], settings: BenchSettings, rounds: int
) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        load.name: {SINGLE: [], CLUSTER: []} for load in LOADS
    }
    nodes = {name: postmasters(s.place) for name, s in served.items()}
    for number in range(rounds):
        order = (SINGLE, CLUSTER) if number % 2 == 0 else (CLUSTER, SINGLE)
        for load in LOADS:
            for name in order:
                record = measure_load(tools, load, served[name], settings, nodes[name])
                runs[load.name][name].append(record)
                if "failure" in record:
                    say(f"FAILED {load.name} on the {name}: {record['failure']}")
                else:
                    say(
                        f"round {number + 1} {load.name} on the {name}:"
                        f" {record['requests_per_second']:,.0f} req/s, p50 {record['p50_ms']:.1f}"
                        f" ms, p99 {record['p99_ms']:.1f} ms"
                    )
    summary: dict[str, Any] = {}
    for load in LOADS:
        per = runs[load.name]
        failed = [r["failure"] for name in (SINGLE, CLUSTER) for r in per[name] if "failure" in r]
        entry: dict[str, Any] = {"what": load.what, "runs": per}
        if failed:
            entry["failure"] = failed[0]
        else:
            for name in (SINGLE, CLUSTER):
                entry[name] = {
                    figure: round(statistics.median(r[figure] for r in per[name]), 2)
                    for figure in ("requests_per_second", "p50_ms", "p99_ms")
                }
            for name in (SINGLE, CLUSTER):
                shares = [r.get("cpu_ms_per_request", {}) for r in per[name]]
                entry[name]["cpu_ms_per_request"] = {
                    part: round(statistics.median(share[part] for share in shares), 2)
                    for part in shares[0]
                    if all(part in share for share in shares)
                }
            pairs = [
                c["requests_per_second"] / s["requests_per_second"]
                for s, c in zip(per[SINGLE], per[CLUSTER], strict=True)
            ]
            entry["ratio_per_round"] = [round(r, 2) for r in pairs]
            entry["ratio"] = round(statistics.median(pairs), 2)
        summary[load.name] = entry
    return summary


# --- 3. moving a tenant under load ----------------------------------------------------------------


# --- the run --------------------------------------------------------------------------------------


def tables(document: dict[str, Any]) -> str:
    lines: list[str] = []
    provisioning_figures = document.get("provisioning")
    if provisioning_figures:
        lines.append("provisioning            single server      cluster")
        single, cluster = provisioning_figures[SINGLE], provisioning_figures[CLUSTER]

        def row(label: str, value: Callable[[dict[str, Any]], Any]) -> None:
            lines.append(f"{label:<24}{value(single)!s:<19}{value(cluster)!s}")

        row("migrate, fresh (s)", lambda f: f.get("migrate_fresh_s", "-"))
        row(
            "migrate, no-op (s)",
            lambda f: f"{f['migrate_nothing_pending_s']} ({f['tenants_before']} t.)",
        )
        row(
            "tenant, no spare (ms)",
            lambda f: (
                f"{f['create_without_spare_ms']['p50']} / {f['create_without_spare_ms']['p95']}"
            ),
        )
        row(
            "+ dept and key (ms)",
            lambda f: (
                f"{f['create_with_department_and_key_ms']['p50']} / {f['create_with_department_and_key_ms']['p95']}"
            ),
        )
        row(
            "spare made (ms)",
            lambda f: f"{f['spare_made_ms']['p50']} / {f['spare_made_ms']['p95']}",
        )
        row(
            "tenant from spare (ms)",
            lambda f: (
                f"{f['create_taking_a_spare_ms']['p50']} / {f['create_taking_a_spare_ms']['p95']}"
            ),
        )
        lines.append("(p50 / p95)")
        lines.append("")
    requests = document.get("requests")
    if requests:
        lines.append(
            "load (median of rounds)   single req/s  p99 ms   cluster req/s  p99 ms   ratio (per round)"
        )
        for name, entry in requests.items():
            if "failure" in entry:
                lines.append(f"{name:<26}FAILED: {entry['failure'][:80]}")
                continue
            s, c = entry[SINGLE], entry[CLUSTER]
            lines.append(
                f"{name:<26}{s['requests_per_second']:>12,.0f}{s['p99_ms']:>8.1f}"
                f"{c['requests_per_second']:>16,.0f}{c['p99_ms']:>8.1f}"
                f"   {entry['ratio']:.2f} {entry['ratio_per_round']}"
            )
            for name in (SINGLE, CLUSTER):
                shares = entry[name].get("cpu_ms_per_request", {})
                lines.append(
                    f"  CPU ms a request, {name}: "
                    + ", ".join(f"{part} {value}" for part, value in shares.items())
                )
        lines.append("")
    move = document.get("move")
    if move and "before" in move:
        lines.append(
            f"move of a tenant of {move['customers_held']:,} customers {move['source']} ->"
            f" {move['target']}: {move['move_seconds']} s ({WRITERS} writers); the command"
            f" {move['move_command_seconds']} s, {move['command_with_nothing_to_move_seconds']} s"
            " with nothing to move"
        )
        lines.append("window    seconds  writes/s   p50 ms   p99 ms   max ms")
        for window in ("before", "during", "after"):
            w = move[window]
            lines.append(
                f"{window:<10}{w['seconds']:>7}{w.get('writes_per_second') or 0:>10}"
                f"{w.get('p50_ms', 0):>9}{w.get('p99_ms', 0):>9}{w.get('max_ms', 0):>9}"
            )
        lines.append(
            f"answers {move['statuses']}; rows lost {move['rows_lost']}, without a 201"
            f" {move['rows_without_a_201']}; deliveries {move['deliveries']}, lost"
            f" {move['deliveries_lost']}, sent twice {move['deliveries_duplicated']}, out of"
            f" order {move['deliveries_out_of_writer_order']}"
        )
        lines.append(
            f"source worker CPU s/s: {move['source_cpu_per_second_before']} before,"
            f" {move['source_cpu_per_second_during_the_command']} during the move command;"
            f" seeded in {move['seed_seconds']} s, its events numbered in"
            f" {move['numbering_seconds']} s"
        )
    elif move:
        lines.append(f"move: FAILED: {move.get('failure')}")
    return "\n".join(lines)


def failures_of(document: dict[str, Any]) -> list[str]:
    found = [
        f"requests: {name}: {e['failure']}"
        for name, e in document.get("requests", {}).items()
        if "failure" in e
    ]
    move = document.get("move") or {}
    found += [f"move: {f}" for f in move.get("failures", [])]
    if move.get("failure"):
        found.append(f"move: {move['failure']}")
    if document.get("failure"):
        found.append(document["failure"])
    return found


def run(arguments: argparse.Namespace) -> int:
    settings = BenchSettings.from_environment()
    parts = set(arguments.parts.replace(",", " ").split())
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    logs = RESULTS / f"citus-{stamp}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    tools = {"wrk": ensure_wrk(), "pgbench": ensure_pgbench()} if "requests" in parts else {}
    document: dict[str, Any] = {
        "date": stamp,
        "command": " ".join(sys.argv),
        "machine": machine(),
        "git": git_state(),
        "settings": {
            **settings.as_dict(),
            "citus_url": arguments.citus_url,
            "tenants": arguments.tenants,
            "spares": SPARES,
            "rounds": arguments.rounds,
            "move_customers": arguments.move_customers,
            "parts": sorted(parts),
            "worker_reads": arguments.worker_reads,
        },
        "versions": {
            SINGLE: server_versions(settings.database_server, settings.redis_url),
            CLUSTER: cluster_versions(arguments.citus_url),
        },
    }
    made = Made()
    results = RESULTS / f"citus-{stamp}.json"
    try:
        with (
            ExitStack() as stack,
            places(
                settings, arguments.citus_url, stack, reads_on_workers=arguments.worker_reads
            ) as where,
        ):
            stack.callback(delete_tenants, where[CLUSTER], made)
            if "provisioning" in parts:
                document["provisioning"] = {
                    name: provisioning(place, made, arguments.tenants, fresh=name == SINGLE)
                    for name, place in where.items()
                }
            elif "requests" in parts or "move" in parts:
                where[SINGLE].cli("migrate")
            if "requests" in parts or "move" in parts:
                served: dict[str, Served] = {}
                for name in (SINGLE, CLUSTER) if "requests" in parts else (CLUSTER,):
                    served[name] = serve(where[name], made, settings, logs)
                    stack.callback(served[name].service.stop)
                document["seed"] = {name: s.seed for name, s in served.items()}
                document["response_bytes"] = {name: s.sizes for name, s in served.items()}
                if "requests" in parts:
                    document["requests"] = requests_part(tools, served, settings, arguments.rounds)
                if "move" in parts:
                    if SINGLE in served:
                        served[SINGLE].service.stop()
                    try:
                        document["move"] = move_part(
                            where[CLUSTER],
                            made,
                            settings,
                            logs,
                            arguments.move_customers,
                            served[CLUSTER],
                        )
                    except (seeding.SeedFailed, ServiceFailed, RuntimeError) as exc:
                        traceback.print_exc()
                        document["move"] = {"failure": f"{type(exc).__name__}: {exc}"}
    except (seeding.SeedFailed, ServiceFailed, RuntimeError) as exc:
        traceback.print_exc()
        document["failure"] = f"{type(exc).__name__}: {exc}"
    finally:
        document["machine"]["load_average_after"] = load_average()
        results.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print()
    print(tables(document))
    print(f"\nResults: {results.relative_to(ROOT)}")
    failed = failures_of(document)
    if failed:
        print("\nbench: citus: FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = arguments_parser(__doc__)
    parser.add_argument(
        "--citus-url",
        default=None,
        help=f"the coordinator (default {DEFAULT_CITUS}, or DEALBASE_BENCH_CITUS_URL)",
    )
    parser.add_argument("--tenants", type=int, default=20, help="tenants created on each (20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the loads on each (3)")
    parser.add_argument(
        "--move-customers",
        type=int,
        default=10_000,
        help="customers the moved tenant holds (10,000)",
    )
    parser.add_argument(
        "--parts", default="provisioning requests move", help="any of provisioning, requests, move"
    )
    parser.add_argument(
        "--worker-reads",
        action="store_true",
        help="the cluster's dealbase serves reads on the tenants' workers"
        " (DEALBASE_CITUS_READS_ON_WORKERS=true)",
    )
    arguments = parser.parse_args()
    arguments.citus_url = (
        arguments.citus_url or os.environ.get("DEALBASE_BENCH_CITUS_URL") or DEFAULT_CITUS
    )
    stop_on_sigterm()
    try:
        return run(arguments)
    except SettingsError as exc:
        print(f"bench: citus: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "bench: citus: interrupted; servers stopped, scratch database dropped", file=sys.stderr
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
