"""What a request costs with a network delay between the Citus coordinator and its workers.

    make bench-citus-network                             # 0.5 ms each way, 200 requests a kind
    .venv/bin/python bench/citus_network.py --requests 50 --rounds 1   # quick look

This machine's kernel has no netem qdisc, so the delay is made in user space: a TCP proxy for
each worker (bench/harness/delay.py) forwards each direction's bytes DELAY_MS after reading them.
The bench works in a database of its own on the cluster at DEALBASE_BENCH_CITUS_URL, made and
dropped on every node with its tenant roles by bench/harness/cluster.py's own_cluster_database
(the shared database's pg_dist_node is never touched). There the workers keep their own address
in pg_dist_node, and pg_dist_poolinfo (on the coordinator only) sends the coordinator's
connections to each worker through its proxy: every command the coordinator sends a worker,
and every answer, crosses the delay; the workers' connections to each other and to the
coordinator do not (poolinfo is the coordinator's alone), nor the reads dealbase serves on the
workers (DEALBASE_CITUS_READS_ON_WORKERS: it finds the worker by pg_dist_node, directly).

A tenant (a distributed schema) seeded as bench/citus.py seeds it, `dealbase serve` on the
coordinator, and a second server whose reads go to the worker. One client sends requests one
after another, REQUESTS of each kind after a warm-up: POST /customers, PATCH /customers/{id},
POST /customers/batch (100 upserts of the same customers, a field changed each time), POST
/deals (bench/wrk/post_deals.lua's body: a deal with three new customers), the GraphQL dashboard
(bench/queries/dashboard.graphql, first 50) through the coordinator and on the worker.

1. direct: before the proxies are in the way (no pg_dist_poolinfo row): the proxy's own cost.
2. ROUNDS rounds, each at delay 0 and at DELAY_MS through the proxies (the order turned each
   round; the servers restarted once first, so that every connection to a worker crosses the
   proxy). p50 and p99 of each kind at each delay, over the rounds; the difference, and the
   round trips it implies: a round trip costs 2 x DELAY_MS more, DELAY_MS each way. Beside it
   the round trips the proxy saw (the coordinator's sends that follow an answer) per request,
   and the delay it achieved (its lateness, p50 and p99: what its timer and the scheduler added).
3. --wrk: wrk -c BENCH_CONNECTIONS, POST /customers and the dashboard at each delay.
4. The commands the coordinator sends the worker for one request of each kind, as
   citus.log_remote_commands logs them (NOTICE, into the coordinator's log, read with
   pg_read_file: --coordinator-log, relative to its data directory); skipped if unreadable.

Prints the tables and writes bench/results/citus-network-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import cluster
from harness.cluster import own_cluster_database
from harness.console import arguments_parser, sayer
from harness.delay import DelayProxies
from harness.figures import percentiles
from harness.load import LoadFailed, WrkLoad, run_wrk
from harness.paths import QUERIES, RESULTS
from harness.processes import Service
from harness.settings import BenchSettings
from harness.stack import REST_PREFIX, Tenant, analyze, start_dealbase
from harness.tools import close_results, ensure_wrk, results_header

from dealbase.db.database import Database

P50_P99 = (0.5, 0.99)

DEFAULT_DELAY_MS = 0.5
BATCH = 100
WARMUP = 10
# A coordinator's log line: "<date> <time> <zone> [pid] NOTICE:  issuing <command>".
ISSUING = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] NOTICE:  issuing (.*)$")
DEALS_BODY = {
    "name": "Analytical engine, 2 units",
    "volume": 250000,
    "deal_origin": "trade fair",
    "customers": [
        {"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com"},
        {"last_name": "Babbage", "first_name": "Charles", "company": "Difference Engines"},
        {"last_name": "Somerville", "first_name": "Mary", "city": "Edinburgh"},
    ],
}


say = sayer("citus-network")


@dataclass(frozen=True)
class Kind:
    name: str
    what: str
    method: str
    path: str
    body: Callable[[int], Any]
    status: int
    on_workers: bool = False  # sent to the server whose reads go to the worker


def kinds(customer_id: str) -> list[Kind]:
    dashboard = {
        "query": (QUERIES / "dashboard.graphql").read_text(),
        "variables": {"first": 50},
    }

    def batch(n: int) -> dict[str, Any]:
        return {
            "operations": [
                {
                    "op": "upsert",
                    "external_id": f"network-{index:03d}",
                    "data": {"last_name": f"Upserted {index:03d}", "city": f"City {n}"},
                }
                for index in range(BATCH)
            ]
        }

    return [
        Kind(
            "post_customer",
            "POST /customers",
            "POST",
            f"{REST_PREFIX}/customers",
            lambda n: {"last_name": f"Network {n:06d}", "first_name": "Ada", "city": "London"},
            201,
        ),
        Kind(
            "patch_customer",
            "PATCH /customers/{id}",
            "PATCH",
            f"{REST_PREFIX}/customers/{customer_id}",
            lambda n: {"email": f"patched{n}@example.org"},
            200,
        ),
        Kind(
            "batch_upserts",
            f"POST /customers/batch, {BATCH} upserts",
            "POST",
            f"{REST_PREFIX}/customers/batch",
            batch,
            200,
        ),
        Kind(
            "post_deal",
            "POST /deals, 3 new customers",
            "POST",
            f"{REST_PREFIX}/deals",
            lambda n: DEALS_BODY,
            201,
        ),
        Kind(
            "dashboard", "GraphQL dashboard, first 50", "POST", "/graphql", lambda n: dashboard, 200
        ),
        Kind(
            "dashboard_on_worker",
            "GraphQL dashboard, read on the worker",
            "POST",
            "/graphql",
            lambda n: dashboard,
            200,
            on_workers=True,
        ),
    ]


class Client:
    """One client per server, sending requests one after another; each answer checked."""

    def __init__(self, servers: dict[bool, Service], tenant: Tenant) -> None:
        self.clients = {
            on_workers: httpx.Client(base_url=s.base_url, headers=tenant.headers, timeout=60)
            for on_workers, s in servers.items()
        }
        self.sequence = 0

    def send(self, kind: Kind) -> float:
        """One request; its milliseconds."""
        self.sequence += 1
        body = kind.body(self.sequence)
        started = time.perf_counter()
        response = self.clients[kind.on_workers].request(kind.method, kind.path, json=body)
        took = (time.perf_counter() - started) * 1000
        answer: Any = response.json() if response.status_code == kind.status else {"errors": 1}
        if "errors" in answer or any(r["status"] >= 400 for r in answer.get("results", ())):
            raise RuntimeError(
                f"{kind.what} answered {response.status_code}, not {kind.status}:"
                f" {response.text[:500]}"
            )
        return took

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def measure_kind(
    client: Client, proxies: DelayProxies, kind: Kind, count: int
) -> tuple[list[float], dict[str, Any]]:
    """WARMUP requests, then COUNT measured: their milliseconds, and what the proxies did."""
    for _ in range(WARMUP):
        client.send(kind)
    proxies.figures()
    latencies = [client.send(kind) for _ in range(count)]
    return latencies, proxies.figures()


@contextmanager
def servers(
    place: cluster.Place, settings: BenchSettings, logs: Path, name: str
) -> Iterator[dict[bool, Service]]:
    """dealbase serving the place: reads through the coordinator (False), on the workers
    (True)."""
    started: dict[bool, Service] = {}
    try:
        for on_workers in (False, True):
            environment = replace(place, reads_on_workers=on_workers).environment()
            log = logs / f"dealbase-{name}{'-worker-reads' if on_workers else ''}.log"
            started[on_workers], _ = start_dealbase(place.url, settings, log, environment)
        yield started
    finally:
        for service in started.values():
            service.stop()


def route_through(url: str, workers: list[tuple[str, int]], ports: list[int]) -> None:
    """The coordinator's connections to each worker through its proxy (pg_dist_poolinfo)."""
    with psycopg.connect(url, autocommit=True) as connection:
        for (host, port), proxy in zip(workers, ports, strict=True):
            connection.execute(
                "INSERT INTO pg_dist_poolinfo (nodeid, poolinfo)"
                " SELECT nodeid, %s FROM pg_dist_node WHERE nodename = %s AND nodeport = %s",
                (f"host=127.0.0.1 port={proxy}", host, port),
            )


def requests_part(
    client: Client,
    proxies: DelayProxies,
    all_kinds: list[Kind],
    delay: float,
    arguments: argparse.Namespace,
) -> dict[str, Any]:
    """ROUNDS rounds at delay 0 and DELAY, alternately first."""
    runs: dict[str, dict[str, list[Any]]] = {
        kind.name: {"0": [], "delay": [], "proxy_0": [], "proxy_delay": []} for kind in all_kinds
    }
    for number in range(arguments.rounds):
        for which in ("0", "delay") if number % 2 == 0 else ("delay", "0"):
            proxies.set_delay(0.0 if which == "0" else delay)
            for kind in all_kinds:
                latencies, proxy = measure_kind(client, proxies, kind, arguments.requests)
                runs[kind.name][which] += latencies
                runs[kind.name][f"proxy_{which}"].append(proxy)
                say(
                    f"round {number + 1}, delay {proxies.delay * 1000:g} ms, {kind.what}:"
                    f" p50 {statistics.median(latencies):.2f} ms;"
                    f" proxy lateness {proxy['lateness_ms']}"
                )
    return runs


def summarize(runs: dict[str, Any], direct: dict[str, list[float]], delay: float) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, run in runs.items():
        at_0, at_delay = percentiles(run["0"], P50_P99), percentiles(run["delay"], P50_P99)
        entry: dict[str, Any] = {
            "direct": percentiles(direct[name], P50_P99),
            "0": at_0,
            "delay": at_delay,
        }
        entry["difference_p50_ms"] = round(at_delay["p50"] - at_0["p50"], 2)
        entry["difference_p99_ms"] = round(at_delay["p99"] - at_0["p99"], 2)
        entry["round_trips_implied"] = round(entry["difference_p50_ms"] / (2 * delay * 1000), 1)
        proxy = run["proxy_delay"]
        requests = len(run["delay"]) or 1
        entry["proxy_round_trips_per_request"] = round(
            sum(p["round_trips"] for p in proxy) / requests, 2
        )
        lateness = [p["lateness_ms"] for p in proxy if p["lateness_ms"]["count"]]
        achieved = [p["achieved_ms"] for p in proxy if p["achieved_ms"]["count"]]
        if lateness:
            entry["proxy_at_delay"] = {
                "chunks": sum(p["chunks"] for p in proxy),
                "lateness_p50_ms": statistics.median(each["p50"] for each in lateness),
                "lateness_p99_ms": max(each["p99"] for each in lateness),
                "achieved_p50_ms": statistics.median(each["p50"] for each in achieved),
                "achieved_p99_ms": max(each["p99"] for each in achieved),
            }
        summary[name] = entry
    return summary


def wrk_part(
    served: dict[bool, Service],
    tenant: Tenant,
    proxies: DelayProxies,
    settings: BenchSettings,
    delay: float,
) -> dict[str, Any]:
    wrk = ensure_wrk()
    figures: dict[str, Any] = {}
    environment = {
        "BENCH_API_KEY": tenant.api_key,
        "BENCH_DEPARTMENT_ID": tenant.department_id,
        "BENCH_PREFIX": REST_PREFIX,
        "BENCH_QUERY_FILE": str(QUERIES / "dashboard.graphql"),
        "BENCH_VARIABLES": '{"first": 50}',
    }
    for script in ("post_customers.lua", "graphql.lua"):
        for seconds in (0.0, delay):
            proxies.set_delay(seconds)
            load = WrkLoad(script, served[False].base_url, environment)
            try:
                if settings.warmup_seconds:
                    run_wrk(wrk, load, settings, settings.warmup_seconds)
                proxies.figures()
                measured = run_wrk(wrk, load, settings, settings.seconds)
            except LoadFailed as exc:
                figures[f"{script} {seconds * 1000:g}"] = {"failure": str(exc)}
                continue
            record = {
                "requests_per_second": round(measured.requests_per_second, 1),
                "p50_ms": measured.p50_ms,
                "p99_ms": measured.p99_ms,
                "errors": measured.errors,
                "proxy": proxies.figures(),
            }
            figures[f"{script} {seconds * 1000:g}"] = record
            say(f"wrk {script} at {seconds * 1000:g} ms: {record}")
    return figures


def _log_size(connection: psycopg.Connection[Any], path: str) -> int:
    row = connection.execute("SELECT size FROM pg_stat_file(%s)", (path,)).fetchone()
    return int(row[0]) if row else 0


def remote_commands_part(
    place: cluster.Place,
    settings: BenchSettings,
    logs: Path,
    tenant: Tenant,
    proxies: DelayProxies,
    all_kinds: list[Kind],
    log_path: str,
) -> dict[str, Any]:
    """One request of each kind by a server whose sessions log the commands the coordinator
    sends the workers; those commands, from its backends' lines of the coordinator's log."""
    url = place.url
    database = url.rpartition("/")[2]
    with psycopg.connect(url, autocommit=True) as connection:
        try:
            _log_size(connection, log_path)
        except psycopg.Error as exc:
            return {"skipped": f"the coordinator's log {log_path!r} is not readable: {exc}"}
        for setting in ("citus.log_remote_commands = on", "log_min_messages = notice"):
            connection.execute(
                sql.SQL("ALTER DATABASE {} SET " + setting).format(sql.Identifier(database))
            )
    figures: dict[str, Any] = {}
    one = replace(settings, workers=1)
    with servers(place, one, logs, "commands") as served:
        client = Client(served, tenant)
        try:
            for kind in all_kinds:
                for _ in range(2):
                    client.send(kind)
                with psycopg.connect(url, autocommit=True) as connection:
                    start = _log_size(connection, log_path)
                    proxies.figures()
                    took = client.send(kind)
                    proxy = proxies.figures()
                    end = _log_size(connection, log_path)
                    row = connection.execute(
                        "SELECT pg_read_file(%s, %s, %s)", (log_path, start, end - start)
                    ).fetchone()
                    pids = {
                        str(pid)
                        for (pid,) in connection.execute(
                            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                            " AND application_name LIKE 'dealbase pid=%'"
                        )
                    }
                commands = [
                    match.group(2)
                    for line in (row[0] if row else "").splitlines()
                    if (match := ISSUING.match(line)) and match.group(1) in pids
                ]
                figures[kind.name] = {
                    "commands": len(commands),
                    "proxy_round_trips": proxy["round_trips"],
                    "ms": round(took, 2),
                    "issued": [command[:160] for command in commands],
                }
                say(
                    f"{kind.what}: {len(commands)} commands to the worker, proxy round trips"
                    f" {proxy['round_trips']}"
                )
        finally:
            client.close()
    return figures


def table(document: dict[str, Any]) -> str:
    delay = document["delay_ms"]
    lines = [
        f"One client, requests one after another; ms. Delay {delay} ms each way"
        f" (a round trip costs {2 * delay:g} ms more); proxied: coordinator -> workers.",
        f"{'request':<40}{'direct':>8}{'0 p50':>8}{'0 p99':>8}{'d p50':>8}{'d p99':>8}"
        f"{'+p50':>7}{'+p99':>7}{'RT':>6}{'proxyRT':>8}{'cmds':>6}",
    ]
    commands = document.get("remote_commands", {})
    for name, entry in document["requests"].items():
        count = commands.get(name, {}).get("commands", "")
        lines.append(
            f"{entry['what']:<40}{entry['direct']['p50']:>8.2f}{entry['0']['p50']:>8.2f}"
            f"{entry['0']['p99']:>8.2f}{entry['delay']['p50']:>8.2f}{entry['delay']['p99']:>8.2f}"
            f"{entry['difference_p50_ms']:>7.2f}{entry['difference_p99_ms']:>7.2f}"
            f"{entry['round_trips_implied']:>6.1f}{entry['proxy_round_trips_per_request']:>8.2f}"
            f"{count!s:>6}"
        )
    lines.append("")
    lines.append(
        f"The proxy at {delay} ms (per kind: p50 the median of the rounds', p99 their max):"
    )
    for entry in document["requests"].values():
        proxy = entry.get("proxy_at_delay")
        if proxy:
            lines.append(
                f"  {entry['what']:<40} achieved p50 {proxy['achieved_p50_ms']:.3f}"
                f" p99 {proxy['achieved_p99_ms']:.3f}; lateness p50 {proxy['lateness_p50_ms']:.3f}"
                f" p99 {proxy['lateness_p99_ms']:.3f} ({proxy['chunks']} chunks)"
            )
    for name, record in document.get("wrk", {}).items():
        lines.append(
            f"wrk {name} ms: {json.dumps({k: v for k, v in record.items() if k != 'proxy'})}"
        )
    return "\n".join(lines)


def run(arguments: argparse.Namespace) -> int:
    settings = BenchSettings.from_environment()
    if arguments.seconds:
        settings = replace(settings, seconds=arguments.seconds)
    delay = arguments.delay_ms / 1000
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    document = results_header(
        stamp,
        delay_ms=arguments.delay_ms,
        requests_per_kind_and_delay=arguments.requests * arguments.rounds,
        rounds=arguments.rounds,
        settings=settings.as_dict(),
    )
    RESULTS.mkdir(exist_ok=True)
    logs = RESULTS / f"citus-network-{stamp}-logs"
    logs.mkdir(exist_ok=True)
    with (
        own_cluster_database(arguments.citus_url) as (url, workers),
        DelayProxies(workers) as proxies,
    ):
        say(f"database {url.rpartition('/')[2]}; proxies {proxies.ports} for {workers}")
        database = Database(url, pool_size=2, distributed_schemas=True)
        try:
            place = cluster.Place("network", url, True, database)
            place.cli("migrate")
            served = cluster.serve(place, cluster.Made(), settings, logs)
            served.service.stop()
            tenant = served.tenant
            analyze(place.url, tenant.schema)
        finally:
            database.dispose()
        document["seed"] = served.seed
        with servers(place, settings, logs, "direct") as started:
            client = Client(started, tenant)
            customer = client.clients[False].post(
                f"{REST_PREFIX}/customers", json={"last_name": "Patched"}
            )
            all_kinds = kinds(customer.json()["id"])
            direct = {
                kind.name: measure_kind(client, proxies, kind, arguments.requests)[0]
                for kind in all_kinds
            }
            client.close()
            say(
                "direct: "
                + ", ".join(f"{k} p50 {statistics.median(v):.2f}" for k, v in direct.items())
            )
        route_through(url, workers, proxies.ports)
        with servers(place, settings, logs, "proxied") as started:
            client = Client(started, tenant)
            try:
                runs = requests_part(client, proxies, all_kinds, delay, arguments)
                if arguments.wrk:
                    document["wrk"] = wrk_part(started, tenant, proxies, settings, delay)
            finally:
                client.close()
        summary = summarize(runs, direct, delay)
        for kind in all_kinds:
            summary[kind.name]["what"] = kind.what
        document["requests"] = summary
        proxies.set_delay(delay)
        document["remote_commands"] = remote_commands_part(
            place, settings, logs, tenant, proxies, all_kinds, arguments.coordinator_log
        )
    close_results("citus-network", stamp, document, table(document))
    return 0


def main() -> int:
    parser = arguments_parser(__doc__)
    parser.add_argument("--delay-ms", type=float, default=DEFAULT_DELAY_MS, help="each way")
    parser.add_argument("--requests", type=int, default=200, help="of each kind, a round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--wrk", action="store_true", help="also wrk at each delay")
    parser.add_argument("--seconds", type=int, help="of each wrk run (BENCH_SECONDS)")
    parser.add_argument(
        "--citus-url", default=os.environ.get("DEALBASE_BENCH_CITUS_URL", cluster.DEFAULT_CITUS)
    )
    parser.add_argument(
        "--coordinator-log",
        default="log",
        help="the coordinator's server log, for pg_read_file (default: log, in its data directory)",
    )
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
