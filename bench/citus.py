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
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import httpx
import orjson
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import seed as seeding
from harness.load import LoadFailed, Measurement, PgbenchLoad, WrkLoad, run_pgbench, run_wrk
from harness.paths import QUERIES, RESULTS, ROOT, venv_tool
from harness.processes import Service, ServiceFailed, log_tail
from harness.settings import BenchSettings, SettingsError
from harness.stack import (
    GENEROUS_BURST,
    GENEROUS_RATE,
    REST_PREFIX,
    Tenant,
    clean_environment,
    scratch_database,
    server_versions,
    start_dealbase,
)
from harness.tools import ensure_pgbench, ensure_wrk, git_state, load_average, machine

from dealbase.config import parse_rate
from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.platform.events.service import number_all_committed
from dealbase.tenancy.registry.placement import Node, tenant_node
from dealbase.tenancy.registry.spare_schemas import prepare_spare_schema
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import Rate, Scope

DEFAULT_CITUS = "postgresql://postgres@127.0.0.1:9700/dealbase"
SINGLE, CLUSTER = "single", "cluster"
SPARES = 5
WRITERS = 4
BATCH = 1000
CONCURRENCY = 8
WORKER_READY = "dealbase worker: delivering webhooks"
# After the writers stop: how long deliveries may take to arrive, and to show a duplicate.
DELIVERY_STALL_SECONDS = 60.0
DUPLICATE_GRACE_SECONDS = 3.0
# Every dealbase process of the run: the cluster's tenants distributed (on the single server the
# setting is off), webhooks to 127.0.0.1 allowed, and no spare schemas made by a worker, so that
# the provisioning figures and the move see only what the run makes.
COMMON_ENVIRONMENT = {
    "DEALBASE_WEBHOOKS_ALLOW_PRIVATE": "true",
    "DEALBASE_SPARE_TENANT_SCHEMAS": "0",
}
T = TypeVar("T")


def say(message: str) -> None:
    print(f"bench: citus: {message}", flush=True)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def at(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 2)

    return {
        "count": len(ordered),
        "p50": at(0.5),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1], 2),
    }


@dataclass
class Place:
    """Where dealbase runs: the single server's scratch database, or the cluster's."""

    name: str
    url: str
    distributed: bool
    database: Database
    # The cluster's reads served by the tenant's worker (DEALBASE_CITUS_READS_ON_WORKERS).
    reads_on_workers: bool = False

    def environment(self) -> dict[str, str]:
        """A dealbase process's settings for this place (beside the bench's own)."""
        environment = {
            **COMMON_ENVIRONMENT,
            "DEALBASE_CITUS_SCHEMA_SHARDING": "true" if self.distributed else "false",
        }
        if self.reads_on_workers:
            environment["DEALBASE_CITUS_READS_ON_WORKERS"] = "true"
        return environment

    def cli(self, *arguments: str) -> tuple[Any, float]:
        """`dealbase ARGUMENTS --json`; its answer and its seconds (start-up included)."""
        environment = {
            **clean_environment(),
            **self.environment(),
            "DEALBASE_DATABASE_URL": self.url,
            "DEALBASE_LOG_LEVEL": "warning",
        }
        started = time.perf_counter()
        result = subprocess.run(
            [venv_tool("dealbase"), *arguments, "--json"],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(
                f"{self.name}: dealbase {' '.join(arguments)} failed ({result.returncode}):"
                f" {result.stderr.strip() or result.stdout.strip()}"
            )
        text = result.stdout.strip()
        return (json.loads(text) if text else None), seconds


@dataclass
class Made:
    """The cluster's tenants this run made, deleted at its end."""

    tenants: list[uuid.UUID] = field(default_factory=list)


def _rate() -> Rate:
    return Rate(per_second=parse_rate(GENEROUS_RATE), burst=int(GENEROUS_BURST))


def make_tenant(place: Place, made: Made, name: str, employees: int = 5) -> Tenant:
    """A tenant with a department (its six default steps), employees and a key that never
    refuses, as bench/harness/stack.py's provision makes it, in this process."""
    database = place.database
    tenant = create_tenant(database, name, distributed=place.distributed)
    if place.distributed:
        made.tenants.append(tenant.id)
    department = admin.create_department(database, tenant.id, "Sales")
    employee_ids = [
        str(
            admin.create_employee(
                database, tenant.id, department.id, f"Employee {n}", f"employee{n}@example.com"
            ).id
        )
        for n in range(1, employees + 1)
    ]
    key = admin.issue_key(database, tenant.id, department.id, "bench", _rate())
    return Tenant(
        tenant_id=str(tenant.id),
        schema=tenant.schema,
        department_id=str(department.id),
        step_ids=tuple(str(step.id) for step in department.steps),
        employee_ids=tuple(employee_ids),
        key_id=str(key.key_id),
        api_key=key.api_key,
        department_keys=(f"{key.api_key} {department.id}",),
    )


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
        created.append(_ms(time.perf_counter() - started))
        if place.distributed:
            made.tenants.append(tenant.id)
        took_spare += tenant.schema in ready
        department = admin.create_department(place.database, tenant.id, "Sales")
        admin.issue_key(place.database, tenant.id, department.id, "bench", _rate())
        with_key.append(_ms(time.perf_counter() - started))
        schemas.append(tenant.schema)
    figures["create_without_spare_ms"] = _percentiles(created)
    figures["create_with_department_and_key_ms"] = _percentiles(with_key)
    figures["created_taking_a_spare_anyway"] = took_spare
    spare_made, spare_taken, taken = [], [], 0
    for index in range(SPARES):
        started = time.perf_counter()
        schema = prepare_spare_schema(place.database, 1000, distributed=place.distributed)
        spare_made.append(_ms(time.perf_counter() - started))
        started = time.perf_counter()
        tenant = create_tenant(
            place.database, f"citus-bench-{stamp}-spare-{index:03d}", distributed=place.distributed
        )
        spare_taken.append(_ms(time.perf_counter() - started))
        if place.distributed:
            made.tenants.append(tenant.id)
        taken += tenant.schema == schema
        schemas.append(tenant.schema)
    figures["spare_made_ms"] = _percentiles(spare_made)
    figures["create_taking_a_spare_ms"] = _percentiles(spare_taken)
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


class SeedFailed(Exception):
    pass


async def _gather(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(call) for call in calls)))


async def _seed(base_url: str, tenant: Tenant, settings: BenchSettings) -> dict[str, int]:
    """bench/harness/seed.py's data, each deal made by external id and its customers linked."""
    async with httpx.AsyncClient(
        base_url=base_url + REST_PREFIX, headers=tenant.headers, timeout=60.0
    ) as client:

        async def send(method: str, path: str, body: dict[str, Any], status: int) -> Any:
            response = await client.request(method, path, json=body)
            if response.status_code != status:
                raise SeedFailed(
                    f"{method} {path} answered {response.status_code}, not {status}:"
                    f" {response.text[:500]}"
                )
            return response.json()

        deal_customers = await _gather(
            [
                partial(
                    send,
                    "POST",
                    "/customers",
                    {
                        "last_name": f"Customer {index:04}.{n}",
                        "first_name": "Ada",
                        "company": f"Company {index % 17}",
                        "email": f"c{index}.{n}@example.com",
                        "city": "London",
                    },
                    201,
                )
                for index in range(settings.seed_deals)
                for n in range(3)
            ]
        )
        deals = await _gather(
            [
                partial(
                    send,
                    "PUT",
                    f"/deals/by-external-id/bench-deal-{index:04}",
                    {
                        "name": f"Deal {index:04}",
                        "volume": 1000 * (index + 1),
                        "deal_origin": "bench",
                    },
                    201,
                )
                for index in range(settings.seed_deals)
            ]
        )
        pairs = [
            (deal_customers[index * 3 + n]["id"], deal["id"])
            for index, deal in enumerate(deals)
            for n in range(3)
        ]

        # One deal's links one after another, so its customers keep their order.
        async def link(index: int, deal: dict[str, Any]) -> None:
            for n in range(3):
                customer = deal_customers[index * 3 + n]["id"]
                await send("POST", f"/deals/{deal['id']}/customers", {"customer_id": customer}, 200)
            await send(
                "PATCH",
                f"/deals/{deal['id']}",
                {
                    "step_id": tenant.step_ids[index % len(tenant.step_ids)],
                    "employee_id": tenant.employee_ids[index % len(tenant.employee_ids)],
                },
                200,
            )

        await _gather([partial(link, index, deal) for index, deal in enumerate(deals)])
        more = max(0, settings.seed_customers - len(pairs))
        await _gather(
            [
                partial(
                    send,
                    "POST",
                    "/customers",
                    {
                        "last_name": f"Customer {index:06}",
                        "first_name": "Grace",
                        "email": f"customer{index}@example.com",
                        "city": "Arlington",
                    },
                    201,
                )
                for index in range(more)
            ]
        )
        activities: list[Callable[[], Awaitable[Any]]] = []
        for index, (customer_id, deal_id) in enumerate(pairs[: seeding.FIRST * 2]):
            for n in range(settings.activities_per_customer):
                activities.append(
                    partial(
                        send,
                        "POST",
                        "/activities",
                        {
                            "type": seeding.ACTIVITY_TYPES[
                                (index + n) % len(seeding.ACTIVITY_TYPES)
                            ],
                            "customer_id": customer_id,
                            "deal_id": deal_id,
                            "employee_id": tenant.employee_ids[index % len(tenant.employee_ids)],
                            "subject": f"Follow-up {n + 1}",
                            "due_at": "2026-12-01T09:00:00Z",
                        },
                        201,
                    )
                )
        await _gather(activities)
    return {"deals": len(deals), "customers": len(pairs) + more, "activities": len(activities)}


@dataclass
class Served:
    place: Place
    tenant: Tenant
    service: Service
    seed: dict[str, int]
    sizes: dict[str, int]


def serve(place: Place, made: Made, settings: BenchSettings, logs: Path) -> Served:
    tenant = make_tenant(place, made, f"citus-bench-{place.name}")
    service, _ = start_dealbase(
        place.url, settings, logs / f"dealbase-{place.name}.log", place.environment()
    )
    try:
        say(f"{place.name}: dealbase serving on {service.base_url}; seeding {tenant.schema}")
        seed = asyncio.run(_seed(service.base_url, tenant, settings))
        sizes = seeding.check_dealbase(service.base_url, tenant)
    except BaseException:
        service.stop()
        raise
    say(f"{place.name}: seeded {seed}; every read answers the seeded data whole")
    return Served(place, tenant, service, seed, sizes)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def cpu_of_tree(pid: int) -> float:
    """CPU seconds of a process, its children that have ended (which it waited for) and those
    still running, to any depth: a server's workers, a PostgreSQL server's backends."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        fields = _stat(current)
        if fields is None:
            continue
        total += sum(int(value) for value in fields[11:15]) / CLOCK_TICKS
        pending.extend(children.get(current, ()))
    return total


def machine_busy() -> float:
    """CPU seconds every core spent not idle, since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLOCK_TICKS


def postmasters(place: Place) -> dict[str, int]:
    """The PostgreSQL servers of the place (on this machine), by the parent of a backend:
    the single server, or the coordinator and each worker."""
    urls = {"postgres": place.url}
    if place.distributed:
        urls = {"coordinator": place.url}
        base, _, rest = place.url.partition("@")
        database = rest.partition("/")[2]
        for node in _workers(place.url):
            urls[f"worker {node.port}"] = f"{base}@{node.host}:{node.port}/{database}"
    found = {}
    for name, url in urls.items():
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT pg_backend_pid()").fetchone()
        fields = _stat(int(row[0])) if row else None
        if fields:
            found[name] = int(fields[1])
    return found


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


def analyze(place: Place, schema: str) -> None:
    """As bench/run.py does before each scenario (autovacuum is off on these machines)."""
    with psycopg.connect(place.url, autocommit=True) as connection:
        for table in ("customers", "deals", "deal_customers", "activities", "employees", "steps"):
            connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))


def measure_load(
    tools: dict[str, str],
    load: Load,
    served: Served,
    settings: BenchSettings,
    nodes: dict[str, int],
) -> dict[str, Any]:
    analyze(served.place, served.tenant.schema)
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
        cpu_before = {name: cpu_of_tree(pid) for name, pid in trees.items()}
        busy_before = machine_busy()
        measured = run(settings.seconds)
        busy = machine_busy() - busy_before
        if measured.requests:
            record["cpu_ms_per_request"] = {
                name: round((cpu_of_tree(pid) - cpu_before[name]) * 1000 / measured.requests, 2)
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


@dataclass(frozen=True)
class Answer:
    writer: int
    sequence: int
    started: float
    ended: float
    status: int
    customer_id: str | None
    retry_after: str | None
    text: str


class Writers:
    """WRITERS clients creating customers one after another until stopped; every answer kept."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.base_url = base_url
        self.headers = headers
        self.stop = threading.Event()
        self.answers: list[Answer] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._write, args=(n,), daemon=True) for n in range(WRITERS)
        ]

    def _write(self, writer: int) -> None:
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=120) as client:
            sequence = 0
            while not self.stop.is_set():
                sequence += 1
                started = time.monotonic()
                try:
                    response = client.post(
                        f"{REST_PREFIX}/customers",
                        json={"last_name": f"move-w{writer}-{sequence:07d}"},
                    )
                except httpx.HTTPError as exc:
                    answer = Answer(
                        writer, sequence, started, time.monotonic(), 0, None, None, repr(exc)
                    )
                else:
                    ok = response.status_code == 201
                    answer = Answer(
                        writer,
                        sequence,
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
    seconds = end - start
    figures: dict[str, Any] = {
        "seconds": round(seconds, 2),
        "answers": len(inside),
        "created": sum(a.status == 201 for a in inside),
        "writes_per_second": round(sum(a.status == 201 for a in inside) / seconds, 1)
        if seconds > 0
        else None,
    }
    if latencies:
        figures.update(
            p50_ms=latencies[len(latencies) // 2],
            p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            max_ms=latencies[-1],
        )
    return figures


def _workers(url: str) -> list[Node]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node"
            " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
        ).fetchall()
    return [Node(host, port) for host, port in rows]


def _seed_batches(base_url: str, tenant: Tenant, customers: int) -> float:
    """MOVE_CUSTOMERS customers by POST /customers/batch, BATCH at a time; the seconds."""
    started = time.perf_counter()
    with httpx.Client(
        base_url=base_url + REST_PREFIX, headers=tenant.headers, timeout=300
    ) as client:
        for first in range(0, customers, BATCH):
            operations = [
                {
                    "op": "create",
                    "data": {
                        "last_name": f"Held {index:06d}",
                        "first_name": "Grace",
                        "email": f"held{index}@example.com",
                        "city": "Arlington",
                    },
                }
                for index in range(first, min(first + BATCH, customers))
            ]
            response = client.post(
                "/customers/batch",
                content=orjson.dumps({"operations": operations}),
                headers={"content-type": "application/json"},
            )
            results = response.json().get("results") if response.status_code == 200 else None
            if not results or any(r.get("status") != 201 for r in results):
                raise SeedFailed(
                    f"POST /customers/batch answered {response.status_code}: {response.text[:500]}"
                )
    return time.perf_counter() - started


class Worker:
    """`dealbase worker` on the cluster, delivering webhooks."""

    def __init__(self, place: Place, log_path: Path) -> None:
        self.log_path = log_path
        self.service = Service(
            "worker",
            [venv_tool("dealbase"), "worker"],
            environment={
                **clean_environment(),
                **place.environment(),
                "DEALBASE_DATABASE_URL": place.url,
                "DEALBASE_LOG_FORMAT": "json",
                "DEALBASE_LOG_LEVEL": "info",
            },
            log_path=log_path,
            port=0,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 90
        while WORKER_READY not in log_path.read_text(errors="replace"):
            if self.service.process.poll() is not None or time.monotonic() > deadline:
                self.service.stop()
                raise ServiceFailed(f"dealbase worker did not start:\n{log_tail(log_path)}")
            time.sleep(0.05)

    def problems(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [
            line for line in text.splitlines() if '"level": "error"' in line or "Traceback" in line
        ]


def move_part(
    cluster: Place, made: Made, settings: BenchSettings, logs: Path, customers: int, served: Served
) -> dict[str, Any]:
    import webhooks  # the receiver of bench/webhooks.py (it imports dealbase itself)

    figures: dict[str, Any] = {"customers_held": customers, "writers": WRITERS}
    failures: list[str] = []
    tenant = make_tenant(cluster, made, "citus-bench-move", employees=0)
    base_url = served.service.base_url
    say(f"move: seeding {customers:,} customers into {tenant.schema} in batches of {BATCH}")
    seconds = _seed_batches(base_url, tenant, customers)
    figures["seed_seconds"] = round(seconds, 2)
    figures["seed_customers_per_second"] = round(customers / seconds, 1)
    # Their events get positions once read (the events feed, a webhook endpoint's creation),
    # a thousand a statement: numbered here, timed, before the endpoint below would.
    started = time.perf_counter()
    scope = Scope(tenant_id=uuid.UUID(tenant.tenant_id), schema=tenant.schema)
    with cluster.database.unit_of_work(scope) as uow:
        number_all_committed(uow, [uuid.UUID(tenant.department_id)])
    figures["numbering_seconds"] = round(time.perf_counter() - started, 2)
    analyze(cluster, tenant.schema)
    with ExitStack() as stack:
        receiver = webhooks.Receiver(logs / "receiver.log")
        stack.callback(receiver.stop)
        tag = f"move-{tenant.schema}"
        created = httpx.post(
            f"{base_url}{REST_PREFIX}/webhooks",
            json={"url": receiver.url(tag), "events": ["customer.created"], "ordered": True},
            headers=tenant.headers,
            timeout=60,
        )
        if created.status_code != 201:
            raise SeedFailed(f"POST /webhooks answered {created.status_code}: {created.text[:500]}")
        worker = Worker(cluster, logs / "worker-cluster.log")
        stack.callback(worker.service.stop)
        source = tenant_node(cluster.url, tenant.schema)
        if source is None:
            raise SeedFailed(f"{tenant.schema} is not a distributed schema")
        target = next(node for node in _workers(cluster.url) if node != source)
        say(f"move: {WRITERS} writers for {settings.seconds} s, then the move {source} -> {target}")
        # The source worker's CPU in each window: what the copy costs it beside the writes.
        source_server = postmasters(cluster)[f"worker {source.port}"]
        cpu_at: list[float] = []
        with Writers(base_url, tenant.headers) as writers:
            time.sleep(1)  # the writers' first requests (connections, a warm server)
            before_start = time.monotonic()
            cpu_at.append(cpu_of_tree(source_server))
            time.sleep(settings.seconds)
            command_start = time.monotonic()
            cpu_at.append(cpu_of_tree(source_server))
            moved, took = cluster.cli(
                "tenant", "move", tenant.tenant_id, "--node", str(target), "--mode", "auto"
            )
            move_end = time.monotonic()
            cpu_at.append(cpu_of_tree(source_server))
            # The move itself, as the command timed it (its start-up and lookup left out).
            move_start = move_end - float(moved["seconds"])
            time.sleep(settings.seconds)
            after_end = time.monotonic()
        # The command's own time around a move: the same command again, with nothing to move.
        again, again_took = cluster.cli("tenant", "move", tenant.tenant_id, "--node", str(target))
        answers = sorted(writers.answers, key=lambda a: a.ended)
        figures.update(
            source=str(source),
            target=str(target),
            placed_after=str(tenant_node(cluster.url, tenant.schema)),
            move_seconds=moved["seconds"],
            move_command_seconds=round(took, 2),
            command_with_nothing_to_move_seconds=round(again_took, 2),
            nothing_moved=again["from"] is None,
            before=_window(answers, before_start, move_start),
            during=_window(answers, move_start, move_end),
            after=_window(answers, move_end, after_end),
            # CPU seconds a second of the source worker's server: while only the writers ran,
            # and from the move command's start to the move's end (its start-up included).
            source_cpu_per_second_before=round(
                (cpu_at[1] - cpu_at[0]) / (command_start - before_start), 3
            ),
            source_cpu_per_second_during_the_command=round(
                (cpu_at[2] - cpu_at[1]) / (move_end - command_start), 3
            ),
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
        answered = {a.customer_id for a in answers if a.customer_id}
        with psycopg.connect(cluster.url) as connection:
            stored = {
                row[0]
                for row in connection.execute(
                    sql.SQL("SELECT id::text FROM {} WHERE last_name LIKE 'move-%'").format(
                        sql.Identifier(tenant.schema, "customers")
                    )
                )
            }
            held = connection.execute(
                sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(tenant.schema, "customers")
                )
            ).fetchone()
        figures["rows_after"] = held[0] if held else None
        figures["rows_lost"] = len(answered - stored)
        figures["rows_without_a_201"] = len(stored - answered)
        if answered - stored:
            failures.append(f"{len(answered - stored)} rows answered 201 are not in the table")
        # Deliveries: every created customer once, each writer's in its order.
        receiver.wait_for(tag, len(answered), stall=DELIVERY_STALL_SECONDS)
        time.sleep(DUPLICATE_GRACE_SECONDS)
        arrivals = receiver.arrivals(tag)
        delivered: Counter[str] = Counter()
        last_sequence: dict[str, int] = {}
        out_of_order = 0
        for arrival in arrivals:
            data = orjson.loads(arrival.body)["data"]
            delivered[data["id"]] += 1
            writer, _, number = data["last_name"].removeprefix("move-").partition("-")
            if int(number) <= last_sequence.get(writer, 0):
                out_of_order += 1
            last_sequence[writer] = int(number)
        figures["deliveries"] = len(arrivals)
        figures["deliveries_lost"] = len(answered - set(delivered))
        figures["deliveries_duplicated"] = sum(n - 1 for n in delivered.values() if n > 1)
        figures["deliveries_of_rows_without_a_201"] = len(set(delivered) - answered)
        figures["deliveries_out_of_writer_order"] = out_of_order
        if figures["deliveries_lost"] or figures["deliveries_duplicated"] or out_of_order:
            failures.append(
                f"deliveries: {figures['deliveries_lost']} lost, {figures['deliveries_duplicated']}"
                f" sent twice, {out_of_order} out of a writer's order"
            )
        figures["worker_errors"] = worker.problems()[:5]
    figures["failures"] = failures
    return figures


# --- the run --------------------------------------------------------------------------------------


def _cluster_versions(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as connection:
        citus = connection.execute("SELECT citus_version()").fetchone()
        nodes = connection.execute(
            "SELECT nodename || ':' || nodeport, groupid FROM pg_dist_node ORDER BY nodeport"
        ).fetchall()
        settings: dict[str, str] = dict(
            connection.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections',"
                " 'shared_buffers', 'synchronous_commit', 'fsync', 'wal_level')"
            ).fetchall()
        )
    return {
        "citus": citus[0] if citus else None,
        "nodes": [f"{name} (group {group})" for name, group in nodes],
        "coordinator_settings": settings,
    }


def delete_tenants(cluster: Place, made: Made) -> None:
    for tenant_id in made.tenants:
        try:
            admin.delete_tenant(cluster.database, tenant_id, distributed=True)
        except Exception as exc:  # one left behind is said, not fatal
            say(f"could not delete tenant {tenant_id} on the cluster: {exc}")


@contextmanager
def places(
    settings: BenchSettings, citus_url: str, stack: ExitStack, *, reads_on_workers: bool = False
) -> Iterator[dict[str, Place]]:
    single_url = stack.enter_context(scratch_database(settings.database_server))
    single = Place(SINGLE, single_url, False, Database(single_url, pool_size=4))
    cluster = Place(
        CLUSTER,
        citus_url,
        True,
        Database(citus_url, pool_size=4, distributed_schemas=True),
        reads_on_workers=reads_on_workers,
    )
    try:
        yield {SINGLE: single, CLUSTER: cluster}
    finally:
        single.database.dispose()
        cluster.database.dispose()


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
            CLUSTER: _cluster_versions(arguments.citus_url),
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
                    except (SeedFailed, seeding.SeedFailed, ServiceFailed, RuntimeError) as exc:
                        traceback.print_exc()
                        document["move"] = {"failure": f"{type(exc).__name__}: {exc}"}
    except (SeedFailed, seeding.SeedFailed, ServiceFailed, RuntimeError) as exc:
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


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    _stop_on_sigterm()
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
