"""A nightly bulk sync: customers upserted by external id in batches, beside the same sync sent
one customer at a time, both measured in the same run.

    .venv/bin/python bench/sync.py                   # the settings of `make bench` (below)
    BENCH_SYNC_CUSTOMERS=5000 .venv/bin/python bench/sync.py

`make bench` runs it after the wrk scenarios and bench/webhooks.py (`BENCH_SCENARIOS=sync` runs it
alone), on a scratch database of its own, with `dealbase serve --workers BENCH_WORKERS`, Redis
rate limits and a key whose own limit never refuses, as the other scenarios have.

The sync: BENCH_SYNC_CUSTOMERS customers (default 100,000), external ids shop-000001 and on,
each `{"op": "upsert", "external_id": ..., "data": {last_name, first_name, email, city}}`, in
batches of BENCH_SYNC_BATCH (1,000) to `POST /api/v1/integration/customers/batch`. Run 1: all of
them new (every result `created`). Run 2: the same customers again, every tenth with another
city (`updated`), the rest as they were (`unchanged`).

The baseline: the same sync one customer a request, `PUT .../customers/by-external-id/{id}`
(201 created, 200 updated or unchanged), for a sample of BENCH_SYNC_SINGLE_CUSTOMERS (10,000) of
the same customers in a tenant of its own, so the bench lasts minutes rather than an hour; its
whole-sync time is extrapolated from its customers a second, and labelled so. Each mode's run is
measured right after the baseline's run of the same number, and its ratio is batch customers/s
over one-at-a-time customers/s.

Both modes send from BENCH_SYNC_CLIENTS (4) threads at once, each with one keep-alive
connection (the standard library's http.client), taking the next request from a shared list
(bodies encoded beforehand). Four, not one: with one request in flight a server of two worker
processes leaves one idle and waits on the client between requests, and with four connections
both workers are likely to get some (the results file has each process's CPU). Not many more:
the transactions of one department number their events in its one event-position row, so
batches at once in one department partly take turns there, and on a 2-core machine more client
threads take CPU from the server they measure. http.client, not httpx: httpx.Client spends
several times http.client's CPU on a request, so at a few hundred PUTs a second it would take a
good part of a core from the one-at-a-time baseline's server, and the ratio would flatter the
batches.

Checked, not only timed (any failure fails the run, exit 1): every batch answers 200 with one
result per operation, in order, each with the outcome expected (`created` in run 1, `updated` or
`unchanged` in run 2), its status (201 or 200), the external id and the fields sent, and in run 2
the id run 1 made, and its `summary` (when sent) counts the same outcomes; every PUT answers 201 in run 1 and 200 in run 2 with the same. After each
run, the database (psycopg, the tenant's schema) holds exactly as many customers in the
department as were synced, each with the values last sent, and GraphQL's `customers {
totalCount }` agrees. Beyond the contract, and reported as findings without failing the run: an
`unchanged` customer's version and updated_at stay as run 1 left them, an `updated` one's move,
and the outbox holds one `customer.created` event per customer and one `customer.updated` per
changed one.
"""

from __future__ import annotations

import http.client
import itertools
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson
import psycopg
from harness.console import arguments_parser, sayer
from harness.figures import number, percentile
from harness.paths import RESULTS
from harness.proc import cpu_seconds, process_tree
from harness.processes import Service
from harness.settings import BenchSettings
from harness.stack import REST_PREFIX, Tenant, provision, scratch_database, start_dealbase
from harness.stack import analyze as analyze_tenant
from harness.standalone import PartsReport, run_alone, stamp
from harness.tools import load_average
from psycopg import sql

BATCH_PATH = f"{REST_PREFIX}/customers/batch"
SINGLE_PATH = REST_PREFIX + "/customers/by-external-id/{}"
JSON = {"content-type": "application/json"}
# A batch of a thousand rows on a busy 2-core machine may take seconds; a slow server is to be
# measured, not cut short (as wrk's BENCH_TIMEOUT is generous).
BATCH_TIMEOUT_S = 300.0
# Every CHANGE_EVERY-th customer gets another city in run 2: 10 %.
CHANGE_EVERY = 10
FIRST_NAMES = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken")
CITIES = ("London", "Arlington", "Lyon", "Porto", "Graz", "Leeds", "Turin", "Ghent", "Bergen")
# The warm-up, in a tenant of its own: a few requests of each kind, so that neither mode's first
# run pays the server's first requests (its pools' connections, code paths' first calls).
WARMUP_CUSTOMERS = 400
WARMUP_BATCH = 100
# Problems listed in a failure or a finding, at most.
SHOWN = 5

Mode = Literal["batch", "single"]


say = sayer("bench: sync")


# --- the customers -----------------------------------------------------------------------------


def external_id(index: int) -> str:
    return f"shop-{index:06d}"


def changed(index: int) -> bool:
    return index % CHANGE_EVERY == 0


def customer_fields(index: int, run: int) -> dict[str, str]:
    """What the shop sends for customer `index` in run 1 or 2 (run 2 moves every tenth)."""
    city = CITIES[index % len(CITIES)]
    if run == 2 and changed(index):
        city = CITIES[(index + 1) % len(CITIES)]
    return {
        "last_name": f"Customer {index:06d}",
        "first_name": FIRST_NAMES[index % len(FIRST_NAMES)],
        "email": f"shop{index}@example.com",
        "city": city,
    }


def expected_outcome(index: int, run: int) -> str:
    if run == 1:
        return "created"
    return "updated" if changed(index) else "unchanged"


STATUS = {"created": 201, "updated": 200, "unchanged": 200}


@dataclass(frozen=True)
class Job:
    """One request of a sync: its body encoded beforehand, and the customers it carries."""

    method: str
    path: str
    body: bytes
    indexes: range


def batch_jobs(customers: int, run: int, batch: int) -> list[Job]:
    jobs = []
    for first in range(1, customers + 1, batch):
        indexes = range(first, min(first + batch, customers + 1))
        operations = [
            {"op": "upsert", "external_id": external_id(i), "data": customer_fields(i, run)}
            for i in indexes
        ]
        jobs.append(Job("POST", BATCH_PATH, orjson.dumps({"operations": operations}), indexes))
    return jobs


def single_jobs(customers: int, run: int) -> list[Job]:
    return [
        Job(
            "PUT",
            SINGLE_PATH.format(external_id(i)),
            orjson.dumps(customer_fields(i, run)),
            range(i, i + 1),
        )
        for i in range(1, customers + 1)
    ]


# --- checking each answer ----------------------------------------------------------------------


@dataclass
class Tally:
    """What one client thread saw: its latencies, the outcomes, the ids answered, and the
    first problem (which stops every thread)."""

    latencies: list[float] = field(default_factory=list)
    # Each request's place in the list of jobs, and its time (s).
    sent: list[tuple[int, float]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    ids: dict[str, str] = field(default_factory=dict)
    response_bytes: int = 0
    problem: str | None = None


@dataclass(frozen=True)
class Expected:
    """What a run's answers must say: its number, and the id run 1 gave each external id."""

    run: int
    ids: Mapping[str, str]


def check_customer(index: int, data: Any, expected: Expected, tally: Tally) -> str | None:
    """The customer answered carries the external id, the fields sent and, in run 2, run 1's id."""
    if not isinstance(data, dict):
        return f"no customer in the answer: {data!r:.300}"
    wanted = external_id(index)
    if data.get("external_id") != wanted:
        return f"external_id {data.get('external_id')!r}, not {wanted!r}"
    sent = customer_fields(index, expected.run)
    wrong = {name: data.get(name) for name, value in sent.items() if data.get(name) != value}
    if wrong:
        return f"answered {wrong}, sent {sent}"
    customer_id = data.get("id")
    if not isinstance(customer_id, str):
        return f"no id: {customer_id!r}"
    before = expected.ids.get(wanted)
    if before is not None and before != customer_id:
        return f"id {customer_id}, where run 1 made {before}"
    tally.ids[wanted] = customer_id
    return None


@dataclass(frozen=True)
class Answer:
    """A response as the checks read it."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None


def check_batch(response: Answer, job: Job, expected: Expected, tally: Tally) -> str | None:
    """200, one result per operation in order, each the outcome expected with its customer."""
    where = f"batch {external_id(job.indexes[0])}..{external_id(job.indexes[-1])}"
    if response.status != 200:
        return f"{where} answered {response.status}: {response.text[:800]}"
    body = response.json()
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != len(job.indexes):
        count = len(results) if isinstance(results, list) else "no"
        return f"{where}: {count} results for {len(job.indexes)} operations: {response.text[:300]}"
    for position, (index, result) in enumerate(zip(job.indexes, results, strict=True)):
        problem = _check_result(index, result, expected, tally)
        if problem:
            return f"{where}, operation {position} ({external_id(index)}): {problem}"
    # The server's own count of the outcomes, when it sends one, must agree with the results.
    summary = body.get("summary")
    if summary is not None:
        counted = Counter(expected_outcome(index, expected.run) for index in job.indexes)
        wanted = {outcome: counted.get(outcome, 0) for outcome in summary}
        if summary != wanted or set(counted) - set(summary):
            return f"{where}: summary {summary}, the results say {dict(counted)}"
    return None


def _check_result(index: int, result: Any, expected: Expected, tally: Tally) -> str | None:
    if not isinstance(result, dict):
        return f"not a result: {result!r:.300}"
    outcome, wanted = result.get("outcome"), expected_outcome(index, expected.run)
    if outcome == "failed":
        return f"failed ({result.get('status')}): {result.get('error')}"
    if outcome != wanted:
        return f"outcome {outcome!r}, not {wanted!r}"
    if result.get("status") != STATUS[wanted]:
        return f"status {result.get('status')!r} for {outcome!r}, not {STATUS[wanted]}"
    tally.outcomes[wanted] += 1
    return check_customer(index, result.get("data"), expected, tally)


def check_single(response: Answer, job: Job, expected: Expected, tally: Tally) -> str | None:
    """201 in run 1 (created), 200 in run 2 (updated or unchanged), with the customer."""
    index = job.indexes[0]
    wanted = 201 if expected.run == 1 else 200
    if response.status != wanted:
        return (
            f"PUT {external_id(index)} answered {response.status}, not {wanted}:"
            f" {response.text[:800]}"
        )
    tally.outcomes[f"answered {response.status}"] += 1
    problem = check_customer(index, response.json(), expected, tally)
    return f"PUT {external_id(index)}: {problem}" if problem else None


Check = Callable[[Answer, Job, Expected, Tally], str | None]


# --- sending: a few clients at once ------------------------------------------------------------


@dataclass
class Driven:
    """One sync's sending: its wall time, the client process's CPU and the threads' tallies."""

    started: float  # perf_counter
    seconds: float
    client_cpu_seconds: float
    tallies: list[Tally]

    @property
    def problem(self) -> str | None:
        return next((tally.problem for tally in self.tallies if tally.problem), None)

    @property
    def latencies(self) -> list[float]:
        return sorted(latency for tally in self.tallies for latency in tally.latencies)

    def latency_by_tenth(self) -> list[float]:
        """The mean request time (ms) of each tenth of the requests, in the order they were
        sent. The clients keep the same number in flight throughout, so a time that grows from
        the first tenth to the last says a request costs more as the department fills (a rate
        per tenth would instead show the start, when no answer is back yet, and the end, when
        fewer are in flight)."""
        sent = sorted(item for tally in self.tallies for item in tally.sent)
        if len(sent) < 10:
            return []
        tenths = [sent[len(sent) * k // 10 : len(sent) * (k + 1) // 10] for k in range(10)]
        return [statistics.fmean(latency for _, latency in part) * 1000 for part in tenths]

    @property
    def outcomes(self) -> Counter[str]:
        return sum((tally.outcomes for tally in self.tallies), Counter())

    @property
    def ids(self) -> dict[str, str]:
        return {k: v for tally in self.tallies for k, v in tally.ids.items()}


def drive(
    port: int,
    tenant: Tenant,
    jobs: Sequence[Job],
    expected: Expected,
    check: Check,
    clients: int,
    timeout: float,
) -> Driven:
    """The jobs from `clients` threads to 127.0.0.1:`port`, each taking the next one when its
    last is answered and checked; the first problem stops them all (what is in flight is still
    answered). No request is sent again: a batch retried after its commit would answer
    `unchanged` where `created` is expected."""
    counter = itertools.count()
    lock = threading.Lock()
    stop = threading.Event()
    tallies = [Tally() for _ in range(clients)]
    headers = {**tenant.headers, **JSON}

    def send(connection: http.client.HTTPConnection, job: Job) -> Answer:
        connection.request(job.method, job.path, body=job.body, headers=headers)
        response = connection.getresponse()
        return Answer(response.status, response.read())

    def client(tally: Tally) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            while not stop.is_set():
                with lock:
                    number = next(counter)
                if number >= len(jobs):
                    return
                job = jobs[number]
                started = time.perf_counter()
                try:
                    answer = send(connection, job)
                except (OSError, http.client.HTTPException) as exc:
                    tally.problem = f"{job.method} {job.path}: {type(exc).__name__}: {exc}"
                    return
                tally.latencies.append(time.perf_counter() - started)
                tally.sent.append((number, tally.latencies[-1]))
                tally.response_bytes += len(answer.body)
                tally.problem = check(answer, job, expected, tally)
                if tally.problem:
                    return
        except Exception as exc:  # a fault of the bench's own: it must not pass for a figure
            tally.problem = f"the client thread failed: {type(exc).__name__}: {exc}"
        finally:
            if tally.problem:
                stop.set()
            connection.close()

    threads = [threading.Thread(target=client, args=(tally,)) for tally in tallies]
    cpu, started = time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Driven(started, time.perf_counter() - started, time.process_time() - cpu, tallies)


# --- CPU of the server and its database --------------------------------------------------------


class CpuMeter:
    """CPU used by dealbase's processes and by the PostgreSQL backends serving them (found by
    the application_name each process's connections carry; PostgreSQL on this host)."""

    def __init__(self, server: Service, observer: psycopg.Connection[Any]) -> None:
        self.server = server
        self.observer = observer

    def backends(self, pids: list[int]) -> list[int]:
        from dealbase.db.database import application_name

        names = [application_name(pid) for pid in pids]
        return [
            pid
            for (pid,) in self.observer.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = ANY(%s)", (names,)
            )
        ]

    def reading(self) -> tuple[dict[int, float], dict[int, float]]:
        """CPU seconds so far of each dealbase process, and of each of their backends."""
        pids = process_tree(self.server.pid)
        mine = {pid: cpu for pid in pids if (cpu := cpu_seconds(pid)) is not None}
        theirs = {pid: cpu for pid in self.backends(pids) if (cpu := cpu_seconds(pid)) is not None}
        return mine, theirs

    @staticmethod
    def used(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
        """Per process, CPU since `before`; a process started since counts from nothing. (One
        that ended in between is lost: a backend replaced mid-run undercounts.)"""
        return {pid: cpu - before.get(pid, 0.0) for pid, cpu in after.items()}


# --- the database's view -----------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    id: str
    fields: dict[str, str]
    version: int
    updated_at: datetime


@dataclass(frozen=True)
class Place:
    """A tenant of the run: the one the batches sync, the one-at-a-time sample's, the warm-up's."""

    name: str
    tenant: Tenant


def stored_customers(database: str, tenant: Tenant) -> tuple[int, dict[str, Stored]]:
    """Every customer of the department, as the tenant's schema holds them, by external id; and
    how many rows there are (customers without an external id included)."""
    table = sql.Identifier(tenant.schema, "customers")
    with psycopg.connect(database, autocommit=True) as connection:
        row = connection.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE department_id = %s").format(table),
            (tenant.department_id,),
        ).fetchone()
        total = int(row[0]) if row else 0
        rows = connection.execute(
            sql.SQL(
                "SELECT external_id, id::text, last_name, first_name, email, city, version,"
                " updated_at FROM {} WHERE department_id = %s AND external_id IS NOT NULL"
            ).format(table),
            (tenant.department_id,),
        ).fetchall()
    customers = {
        ext: Stored(
            id_,
            {"last_name": last, "first_name": first, "email": email, "city": city},
            version,
            updated_at,
        )
        for ext, id_, last, first, email, city, version, updated_at in rows
    }
    return total, customers


def event_counts(database: str, tenant: Tenant) -> dict[str, int]:
    table = sql.Identifier(tenant.schema, "events")
    with psycopg.connect(database, autocommit=True) as connection:
        rows = connection.execute(
            sql.SQL("SELECT type, count(*) FROM {} WHERE department_id = %s GROUP BY type").format(
                table
            ),
            (tenant.department_id,),
        ).fetchall()
    return {kind: int(count) for kind, count in rows}


def graphql_total(base_url: str, tenant: Tenant) -> int | str:
    """The API's own count of the department's customers, or what it answered instead."""
    response = httpx.post(
        f"{base_url}/graphql",
        json={"query": "{ customers(first: 1) { totalCount } }"},
        headers=tenant.headers,
        timeout=60.0,
        trust_env=False,
    )
    try:
        return int(response.json()["data"]["customers"]["totalCount"])
    except (TypeError, KeyError, ValueError):
        return f"{response.status_code}: {response.text[:300]}"


def analyze(database: str, tenants: Sequence[Tenant]) -> None:
    """ANALYZE the synced tables before each run, as autovacuum would keep them (it is off on
    these machines): run 2 then meets 100,000 rows planned as 100,000, not as the empty table."""
    for tenant in tenants:
        analyze_tenant(database, tenant.schema, ("customers", "events"))


def _listed(problems: list[str]) -> str:
    more = f" (and {len(problems) - SHOWN:,} more)" if len(problems) > SHOWN else ""
    return "; ".join(problems[:SHOWN]) + more


def check_stored(
    total: int, customers: Mapping[str, Stored], count: int, run: int, ids: Mapping[str, str]
) -> str | None:
    """Exactly `count` customers, each holding what run `run` sent, under the id answered."""
    if total != count or len(customers) != count:
        return (
            f"{total:,} customers in the department ({len(customers):,} with an external id),"
            f" not {count:,}"
        )
    problems = []
    for index in range(1, count + 1):
        ext = external_id(index)
        row = customers.get(ext)
        if row is None:
            problems.append(f"{ext} missing")
        elif row.fields != customer_fields(index, run):
            problems.append(f"{ext} holds {row.fields}, not {customer_fields(index, run)}")
        elif ids.get(ext) not in (None, row.id):
            problems.append(f"{ext} has id {row.id}, answered {ids.get(ext)}")
    return _listed(problems) if problems else None


def writes_findings(
    before: Mapping[str, Stored], after: Mapping[str, Stored], count: int
) -> list[str]:
    """Run 2 against run 1: an unchanged customer is not written; an updated one is, once."""
    touched, untouched = [], []
    for index in range(1, count + 1):
        ext = external_id(index)
        old, new = before.get(ext), after.get(ext)
        if old is None or new is None:
            continue
        moved = (new.version, new.updated_at) != (old.version, old.updated_at)
        if changed(index) and (new.version != old.version + 1 or new.updated_at <= old.updated_at):
            untouched.append(f"{ext} v{old.version}->v{new.version}")
        elif not changed(index) and moved:
            touched.append(
                f"{ext} v{old.version}->v{new.version}, updated_at {old.updated_at.isoformat()}"
                f" -> {new.updated_at.isoformat()}"
            )
    findings = []
    if touched:
        findings.append(
            f"{len(touched):,} customers answered `unchanged` were written anyway (version or"
            f" updated_at moved): {_listed(touched)}"
        )
    if untouched:
        findings.append(
            f"{len(untouched):,} customers answered `updated` did not move to the next version"
            f" with a later updated_at: {_listed(untouched)}"
        )
    return findings


def events_findings(counts: Mapping[str, int], count: int, run: int) -> list[str]:
    wanted = {"customer.created": count}
    if run == 2:
        wanted["customer.updated"] = count // CHANGE_EVERY
    found = {kind: counts.get(kind, 0) for kind in sorted({*wanted, *counts})}
    if found == wanted:
        return []
    return [f"the outbox after run {run} holds {_events(found)}, not {_events(wanted)}"]


def _events(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{count:,} {kind}" for kind, count in counts.items())


# --- figures -----------------------------------------------------------------------------------


@dataclass
class Pass:
    """One mode's run of the sync (or of its sample)."""

    name: str
    mode: Mode
    run: int
    what: str
    customers: int
    requests: int
    clients: int
    seconds: float = 0.0
    customers_per_second: float = 0.0
    # The whole sync's time: measured for batches; for the sample, the full count at the
    # sample's rate (`extrapolated`).
    sync_customers: int = 0
    sync_seconds: float = 0.0
    extrapolated: bool = False
    request_p50_ms: float = 0.0
    request_p90_ms: float = 0.0
    request_p99_ms: float = 0.0
    request_max_ms: float = 0.0
    # The mean request time (ms) of each tenth of the requests (Driven.latency_by_tenth).
    latency_by_tenth_ms: list[float] = field(default_factory=list)
    request_bytes: float = 0.0  # mean body sent
    response_bytes: float = 0.0  # mean body answered
    outcomes: dict[str, int] = field(default_factory=dict)
    client_cpu_us: float | None = None  # per customer: this process, every client thread
    dealbase_cpu_us: float | None = None  # per customer: dealbase serve and its workers
    database_cpu_us: float | None = None  # per customer: their PostgreSQL backends
    dealbase_cpu_by_process: dict[str, float] = field(default_factory=dict)  # seconds
    stored: int | None = None  # customers in the department afterwards (the database's count)
    graphql_total: int | str | None = None
    events: dict[str, int] = field(default_factory=dict)
    # Beyond the contract, reported without failing the run (the module's docstring).
    findings: list[str] = field(default_factory=list)
    compare_to: str | None = None
    ratio: float | None = None
    failure: str | None = None


@dataclass
class Report(PartsReport):
    passes: list[Pass] = field(default_factory=list)

    def parts(self) -> dict[str, list[Any]]:
        return {"passes": self.passes}

    def more(self) -> dict[str, Any]:
        return {"findings": self.findings}

    @property
    def findings(self) -> list[str]:
        return [f"{row.name}: {finding}" for row in self.passes for finding in row.findings]


def _whole(row: Pass) -> str:
    if row.extrapolated:
        return (
            f"{row.sync_seconds:,.1f} s (extrapolated to {row.sync_customers:,}"
            f" from {row.customers:,})"
        )
    return f"{row.sync_seconds:,.1f} s"


def _tenths(row: Pass) -> str:
    if not row.latency_by_tenth_ms:
        return "—"
    return f"{row.latency_by_tenth_ms[0]:,.1f} → {row.latency_by_tenth_ms[-1]:,.1f}"


def tables(report: Report) -> str:
    if not report.passes:
        return f"sync: no figures: {'; '.join(report.failures) or 'nothing ran'}"
    lines = [
        "| sync | customers | requests | customers/s | whole sync | ratio | to |"
        " request p50 / p99 ms | request ms, first → last tenth | client CPU µs/customer |"
        " dealbase CPU µs/customer | PostgreSQL CPU µs/customer | outcomes |",
        "|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report.passes:
        if row.failure:
            lines.append(
                f"| {row.name} | {row.customers:,} | {row.requests:,} | FAILED | | | | | | | | | |"
            )
            continue
        outcomes = ", ".join(f"{count:,} {name}" for name, count in sorted(row.outcomes.items()))
        lines.append(
            f"| {row.name} | {row.customers:,} | {row.requests:,} |"
            f" {row.customers_per_second:,.0f} | {_whole(row)} |"
            f" {number(row.ratio, 2) if row.compare_to else '—'} | {row.compare_to or ''} |"
            f" {row.request_p50_ms:,.1f} / {row.request_p99_ms:,.1f} | {_tenths(row)} |"
            f" {number(row.client_cpu_us)} | {number(row.dealbase_cpu_us)} |"
            f" {number(row.database_cpu_us)} | {outcomes} |"
        )
    clients = report.settings.get("clients")
    lines.append(
        f"\n{clients} clients at once in every row; ratio: batch customers/s over one-at-a-time"
        " customers/s of the same run. Checked after each row: the database holds exactly the"
        " customers synced, each with what was last sent."
    )
    for finding in report.findings:
        lines.append(f"FINDING (not a failure): {finding}")
    return "\n".join(lines)


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    settings: BenchSettings
    logs: Path


class Bench:
    """The scratch database, its three tenants, dealbase serving them, and the passes."""

    def __init__(self, options: Options, stack: ExitStack) -> None:
        settings = options.settings
        self.settings = settings
        options.logs.mkdir(parents=True, exist_ok=True)
        self.database = stack.enter_context(scratch_database(settings.database_server))
        say(f"scratch database {self.database.rpartition('/')[2]}: migrating, three tenants")
        self.batch = provision(self.database, employees=0, name="sync batches")
        self.single = provision(
            self.database, employees=0, name="sync one at a time", migrate=False
        )
        self.warmup = provision(self.database, employees=0, name="sync warm-up", migrate=False)
        self.server, _ = start_dealbase(self.database, settings, options.logs / "dealbase-sync.log")
        stack.callback(self.server.stop)
        say(f"dealbase serving on {self.server.base_url} ({settings.workers} workers)")
        self.observer = psycopg.connect(self.database, autocommit=True)
        stack.callback(self.observer.close)
        self.meter = CpuMeter(self.server, self.observer)
        # Run 1's rows, by mode, to hold run 2's writes against.
        self.snapshots: dict[str, dict[str, Stored]] = {}
        # The id each external id was given, by mode, from run 1's answers.
        self.ids: dict[str, dict[str, str]] = {}

    def warm_up(self) -> str | None:
        """Both kinds of request, twice over (creating, then upserting again), in the warm-up's
        tenant; a problem here fails the run as any other."""
        port, clients = self.server.port, self.settings.sync_clients
        for run in (1, 2):
            expected = Expected(run, {})
            batches = batch_jobs(WARMUP_CUSTOMERS, run, WARMUP_BATCH)
            singles = single_jobs(WARMUP_CUSTOMERS // 4, run)
            # The PUTs name customers the batches made: in run 1 they are not new, so their
            # answers are not checked against run 1's 201; only that they are answered.
            for jobs, check in ((batches, check_batch), (singles, _answered)):
                driven = drive(port, self.warmup, jobs, expected, check, clients, BATCH_TIMEOUT_S)
                if driven.problem:
                    return f"warm-up: {driven.problem}"
        return None

    def sync(self, mode: Mode, run: int) -> Pass:
        """One mode's run, timed, then checked against the database."""
        settings = self.settings
        tenant = self.batch if mode == "batch" else self.single
        count = settings.sync_customers if mode == "batch" else settings.sync_single_count
        if mode == "batch":
            jobs = batch_jobs(count, run, settings.sync_batch)
            what = f"batches of {settings.sync_batch} upserts, POST {BATCH_PATH}"
            check: Check = check_batch
            timeout = BATCH_TIMEOUT_S
        else:
            jobs = single_jobs(count, run)
            what = f"one customer a request, PUT {SINGLE_PATH.format('{external_id}')}"
            check = check_single
            timeout = float(settings.timeout_seconds)
        row = Pass(f"{mode}_run{run}", mode, run, what, count, len(jobs), settings.sync_clients)
        row.request_bytes = statistics.fmean(len(job.body) for job in jobs)
        say(
            f"{row.name}: {count:,} customers in {len(jobs):,} requests from"
            f" {settings.sync_clients} clients ({'all new' if run == 1 else '10 % changed'})"
        )
        analyze(self.database, (tenant,))
        expected = Expected(run, self.ids.get(mode, {}))
        before = self.meter.reading()
        driven = drive(
            self.server.port, tenant, jobs, expected, check, settings.sync_clients, timeout
        )
        after = self.meter.reading()
        self._figures(row, driven, before, after)
        if driven.problem:
            row.failure = driven.problem
            return row
        self.ids[mode] = {**self.ids.get(mode, {}), **driven.ids}
        self._verify(row, tenant, count)
        return row

    def _figures(
        self,
        row: Pass,
        driven: Driven,
        before: tuple[dict[int, float], dict[int, float]],
        after: tuple[dict[int, float], dict[int, float]],
    ) -> None:
        count = row.customers
        row.seconds = driven.seconds
        row.customers_per_second = count / driven.seconds if driven.seconds else 0.0
        row.sync_customers = self.settings.sync_customers
        row.extrapolated = row.mode == "single" and count != row.sync_customers
        row.sync_seconds = (
            row.sync_customers / row.customers_per_second if row.customers_per_second else 0.0
        )
        latencies = driven.latencies
        if latencies:
            row.request_p50_ms = percentile(latencies, 0.50) * 1000
            row.request_p90_ms = percentile(latencies, 0.90) * 1000
            row.request_p99_ms = percentile(latencies, 0.99) * 1000
            row.request_max_ms = latencies[-1] * 1000
            answered = sum(tally.response_bytes for tally in driven.tallies)
            row.response_bytes = answered / len(latencies)
        row.latency_by_tenth_ms = [round(ms, 1) for ms in driven.latency_by_tenth()]
        row.outcomes = dict(driven.outcomes)
        row.client_cpu_us = driven.client_cpu_seconds / count * 1e6
        server = CpuMeter.used(before[0], after[0])
        backends = CpuMeter.used(before[1], after[1])
        row.dealbase_cpu_by_process = {str(pid): round(cpu, 2) for pid, cpu in server.items()}
        row.dealbase_cpu_us = sum(server.values()) / count * 1e6 if server else None
        row.database_cpu_us = sum(backends.values()) / count * 1e6 if backends else None

    def _verify(self, row: Pass, tenant: Tenant, count: int) -> None:
        """The database holds exactly the customers synced, each as last sent; GraphQL's count
        agrees. Beyond the contract (findings): the writes of run 2 and the outbox."""
        total, customers = stored_customers(self.database, tenant)
        row.stored = total
        row.failure = check_stored(total, customers, count, row.run, self.ids[row.mode])
        row.graphql_total = graphql_total(self.server.base_url, tenant)
        if row.failure is None and row.graphql_total != count:
            row.failure = f"GraphQL customers.totalCount answered {row.graphql_total}, not {count}"
        row.events = event_counts(self.database, tenant)
        row.findings = events_findings(row.events, count, row.run)
        if row.run == 1:
            self.snapshots[row.mode] = customers
        else:
            row.findings += writes_findings(self.snapshots.get(row.mode, {}), customers, count)


def _answered(response: Answer, job: Job, expected: Expected, tally: Tally) -> str | None:
    """The warm-up's PUTs: any success will do."""
    if response.status not in (200, 201):
        return f"PUT {job.path} answered {response.status}: {response.text[:800]}"
    return None


def _say(row: Pass) -> None:
    if row.failure:
        print(f"\nbench: sync: FAILED {row.name}: {row.failure}\n", file=sys.stderr, flush=True)
        return
    ratio = f", {row.ratio:.2f} of {row.compare_to}" if row.ratio is not None else ""
    say(
        f"{row.name}: {row.customers_per_second:,.0f} customers/s ({row.customers:,} in"
        f" {row.seconds:,.1f} s{ratio}); request p50 {row.request_p50_ms:,.1f} ms,"
        f" p99 {row.request_p99_ms:,.1f} ms; {row.stored:,} stored, as sent"
    )


def passes(bench: Bench) -> Iterator[Pass]:
    """Run 1 then run 2; in each, the one-at-a-time sample first, then the batches compared to
    it (the peer right before, as in the wrk scenarios). Stops at the first failure: a run 2
    after a failed run 1 would measure something else."""
    for run in (1, 2):
        single = bench.sync("single", run)
        yield single
        if single.failure:
            return
        batch = bench.sync("batch", run)
        batch.compare_to = single.name
        if batch.failure is None and single.customers_per_second:
            batch.ratio = batch.customers_per_second / single.customers_per_second
        yield batch
        if batch.failure:
            return


def measure(options: Options) -> Report:
    """Every pass, on a scratch database dropped after (also on an error)."""
    settings = options.settings
    report = Report(
        settings={
            "customers": settings.sync_customers,
            "single_customers": settings.sync_single_count,
            "batch": settings.sync_batch,
            "clients": settings.sync_clients,
            "workers": settings.workers,
            "changed_in_run_2": f"1 in {CHANGE_EVERY}",
            "warmup_customers": WARMUP_CUSTOMERS,
        },
        load_average={"before": load_average()},
    )
    with ExitStack() as stack:
        bench = Bench(options, stack)
        say(f"warm-up: {WARMUP_CUSTOMERS} customers in batches, {WARMUP_CUSTOMERS // 4} by PUT")
        report.failure = bench.warm_up()
        if report.failure is None:
            for row in passes(bench):
                report.passes.append(row)
                _say(row)
    report.load_average["after"] = load_average()
    return report


def main() -> int:
    parser = arguments_parser(
        __doc__,
        "Settings: BENCH_SYNC_CUSTOMERS, BENCH_SYNC_SINGLE_CUSTOMERS, BENCH_SYNC_BATCH,"
        " BENCH_SYNC_CLIENTS, BENCH_WORKERS, BENCH_POOL_SIZE (bench/README.md).",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args()
    logs = RESULTS / f"{stamp()}-logs"
    return run_alone(
        "sync",
        lambda: measure(Options(BenchSettings.from_environment(), logs)),
        tables,
        arguments.json,
    )


if __name__ == "__main__":
    sys.exit(main())
