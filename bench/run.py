"""`make bench` and `make profile`: dealbase under load beside its peers, measured in one run.

    .venv/bin/python bench/run.py bench                        # every scenario, one table
    .venv/bin/python bench/run.py profile --scenario post_customers_one_department

bench: makes a scratch database on the PostgreSQL server (DEALBASE_BENCH_DATABASE_URL), migrates
and seeds it, serves dealbase with every production feature on, and loads each scenario with wrk
(a warm-up first), beside the baseline FastAPI + psycopg service of bench/baselines, pgbench
running the baseline's SQL and PostGraphile 5 serving the tenant's schema. It prints one table
(req/s, p50, p99, errors, lock waits, each ratio to its peer) and the targets, writes
bench/results/<date>.json, and drops the database. A scenario with any error (a non-2xx answer,
a GraphQL error, a socket error or a timeout) fails the run (exit 1) instead of giving a figure.

After the wrk scenarios, bench runs bench/webhooks.py (webhook delivery by one `dealbase
worker`, beside plain httpx; BENCH_SCENARIOS=webhooks runs it alone) on a scratch database of
its own, prints its tables after the targets, and writes its figures into the results file; a
delivery that lost events fails the run. Then bench/sync.py (a nightly sync of customers upserted
in batches by external id, beside the same sync one customer a request; BENCH_SCENARIOS=sync runs
it alone), likewise; an answer or a count that is not what was synced fails the run. Then
bench/live.py (1,000 GraphQL subscriptions on one department while writes arrive at 50 a second:
the delay from each commit to each subscriber, the server's CPU per event delivered;
BENCH_SCENARIOS=live runs it alone), likewise; an event lost or received twice fails the run.

profile: the same setup for dealbase alone, one scenario under load while py-spy records the
server's worker processes; writes a speedscope file and a text summary to bench/results/.

Settings come from the environment; bench/README.md lists them.
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Callable
from contextlib import ExitStack, suppress
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from harness import seed as seeding
from harness.console import arguments_parser, sayer
from harness.cpu import CpuUse
from harness.load import LoadFailed, Measurement, PgbenchLoad, WrkLoad, run_pgbench, run_wrk
from harness.lock_waits import LockWaits
from harness.paths import QUERIES, RESULTS, ROOT
from harness.processes import Service, ServiceFailed, stop_on_sigterm
from harness.profiling import ProfileFailed, start_recording, stop_recording, summarize
from harness.report import (
    Outcome,
    Round,
    scenario_records,
    table,
    targets,
    targets_text,
)
from harness.scenarios import (
    DEALBASE_SCENARIOS,
    DEPARTMENTS,
    LIVE,
    OWN_TABLES,
    SYNC,
    WEBHOOKS,
    Scenario,
    UnknownScenario,
    select,
    wants_live,
    wants_sync,
    wants_webhooks,
)
from harness.settings import BenchSettings, SettingsError
from harness.stack import (
    REST_PREFIX,
    Tenant,
    analyze,
    provision,
    scratch_database,
    server_versions,
    start_baseline,
    start_dealbase,
    start_postgraphile,
)
from harness.tools import (
    ToolMissing,
    Toolset,
    ensure_node,
    ensure_pgbench,
    ensure_postgraphile,
    ensure_py_spy,
    ensure_wrk,
    git_state,
    load_average,
    machine,
    versions,
    write_results,
)
from harness.wal import WalWritten

say = sayer("bench")


class Run:
    """One run's stack: the scratch database, the tenant, the servers and the seeded ids."""

    def __init__(self, settings: BenchSettings, stamp: str, stack: ExitStack) -> None:
        self.settings = settings
        self.stamp = stamp
        self.stack = stack
        self.logs = RESULTS / f"{stamp}-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.database = stack.enter_context(scratch_database(settings.database_server))
        say(f"scratch database {self.database.rpartition('/')[2]}: migrating, provisioning")
        self.tenant: Tenant = provision(self.database, departments=DEPARTMENTS)
        # post_customers_departments.lua's files: the first department alone, and all of them.
        self.keys_files = {}
        for count in sorted({1, DEPARTMENTS}):
            path = self.logs / f"department_keys_{count}.txt"
            path.write_text("\n".join(self.tenant.department_keys[:count]) + "\n")
            self.keys_files[count] = path
        self.dealbase_log = self.logs / "dealbase.log"
        self.dealbase, self.dealbase_settings = start_dealbase(
            self.database, settings, self.dealbase_log
        )
        stack.callback(self.dealbase.stop)
        say(f"dealbase serving on {self.dealbase.base_url} ({settings.workers} workers)")
        say("seeding through the REST API")
        self.seeded = seeding.seed(self.dealbase.base_url, self.tenant, settings)
        self.ids_file = self.logs / "customer_ids.txt"
        self.ids_file.write_text("\n".join(self.seeded.customer_ids) + "\n")
        self.activity_ids_file = self.logs / "activity_ids.txt"
        self.activity_ids_file.write_text("\n".join(self.seeded.activity_ids) + "\n")
        self.sizes = seeding.check_dealbase(self.dealbase.base_url, self.tenant)
        say(f"seeded {self.seeded.summary()}; every read answers the seeded data whole")

    def wrk_load(self, scenario: Scenario, base_url: str) -> WrkLoad:
        assert scenario.script is not None
        api_key, department_id = self.tenant.department_keys[scenario.department].split(" ")
        environment = {
            "BENCH_API_KEY": api_key,
            "BENCH_DEPARTMENT_ID": department_id,
            "BENCH_PREFIX": REST_PREFIX,
            "BENCH_IDS_FILE": str(
                self.activity_ids_file if scenario.collection == "activities" else self.ids_file
            ),
            "BENCH_KEYS_FILE": str(self.keys_files[scenario.departments]),
        }
        if scenario.collection:
            environment["BENCH_COLLECTION"] = scenario.collection
        if scenario.path:
            environment["BENCH_PATH"] = scenario.path
        if scenario.query:
            environment["BENCH_QUERY_FILE"] = str(QUERIES / scenario.query)
            environment["BENCH_VARIABLES"] = '{"first": 50}'
        return WrkLoad(scenario.script, base_url, environment)


# A slow server on a busy machine: a run lasts long enough for each connection to complete about
# ROUNDS requests (from the warm-up's p50), up to MAX_SECONDS; a warm-up in which not every
# connection got an answer is run again, longer, up to MAX_WARMUP seconds.
ROUNDS = 10
MAX_SECONDS = 60
MAX_WARMUP = 32


def measure(
    scenario: Scenario,
    run: Callable[[int], Measurement],
    settings: BenchSettings,
    during: Callable[[], Any] | None = None,
    database: str | None = None,
    server_pid: int | None = None,
) -> Outcome:
    """A warm-up, then the measured run; any error fails the scenario. With ``database``, the
    measured run's lock waits there are sampled (harness/lock_waits.py), and the CPU it cost
    the server (``server_pid`` and its children), that database's backends, Redis and the load
    tool (harness/cpu.py), and the WAL it wrote and the checkpoints meanwhile (harness/wal.py)."""
    outcome = Outcome(scenario, load_average_before=load_average())
    seconds = settings.seconds
    try:
        if settings.warmup_seconds:
            warmup = settings.warmup_seconds
            warm = run(warmup)
            while not warm.errors and warm.requests < settings.connections and warmup < MAX_WARMUP:
                warmup = min(warmup * 4, MAX_WARMUP)
                say(f"{scenario.name}: slow answers, warming up again for {warmup} s")
                warm = run(warmup)
            outcome.extra["warmup_seconds"] = warmup
            if warm.errors:
                outcome.measurement = warm
                outcome.failure = f"{warm.errors} errors in the warm-up: {warm.error_detail}"
                return outcome
            if warm.requests:
                stretched = math.ceil(ROUNDS * warm.p50_ms / 1000)
                seconds = max(seconds, min(MAX_SECONDS, stretched))
        if during is not None:
            during()
        if database is None:
            outcome.measurement = run(seconds)
        else:
            with (
                LockWaits(database) as waits,
                CpuUse(server_pid, database) as cpu,
                WalWritten(database) as wal,
            ):
                outcome.measurement = run(seconds)
            outcome.extra["cpu_us_per_request"] = cpu.per_request(outcome.measurement.requests)
            outcome.extra["run_queue_wait_us_per_request"] = cpu.waited_per_request(
                outcome.measurement.requests
            )
            outcome.extra["wal_per_request"] = wal.per_request(outcome.measurement.requests)
            outcome.extra["checkpoints"] = wal.checkpoints()
            outcome.extra["lock_waits"] = {
                "share": waits.share,
                "backend_samples": waits.active,
                "waiting": waits.waiting,
                "by_event": dict(waits.by_event.most_common()),
                "error": waits.error,
            }
    except LoadFailed as exc:
        outcome.failure = str(exc)
        return outcome
    finally:
        outcome.load_average_after = load_average()
    m = outcome.measurement
    if m.errors:
        outcome.failure = f"{m.errors} errors: {m.error_detail}"
    elif m.requests == 0:
        outcome.failure = f"no request completed in {seconds} s (each took longer)"
    return outcome


def report_line(outcome: Outcome) -> None:
    m = outcome.measurement
    if outcome.ok and m:
        say(
            f"{outcome.scenario.name}: {m.requests_per_second:,.0f} req/s, p50 {m.p50_ms:.1f} ms,"
            f" p99 {m.p99_ms:.1f} ms, {m.requests} requests, 0 errors"
        )
        return
    print(f"\nbench: FAILED {outcome.scenario.name}: {outcome.failure}", file=sys.stderr)
    if m and m.first_error:
        print(f"  first bad response: {m.first_error}", file=sys.stderr)
    print("", file=sys.stderr, flush=True)


def bench(settings: BenchSettings) -> int:
    selected = select(settings.scenarios)
    with_webhooks = wants_webhooks(settings.scenarios)
    with_sync = wants_sync(settings.scenarios)
    with_live = wants_live(settings.scenarios)
    servers = {scenario.server for scenario in selected}
    tools = Toolset(
        wrk=ensure_wrk() if selected else None,
        pgbench=ensure_pgbench() if "pgbench" in servers else None,
        node=(node := ensure_node()) if "postgraphile" in servers else None,
    )
    if tools.node:
        tools = Toolset(tools.wrk, tools.pgbench, tools.node, ensure_postgraphile(node))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    results_path = RESULTS / f"{stamp}.json"
    document: dict[str, Any] = {
        "date": stamp,
        "command": " ".join(sys.argv),
        "machine": machine(),
        "git": git_state(),
        "versions": versions(tools),
        "settings": settings.as_dict(),
    }
    rounds: list[Round] = []
    if selected:
        in_rounds = f", in {settings.rounds} rounds" if settings.rounds > 1 else ""
        say(
            f"{len(selected)} scenarios, {settings.seconds} s each after a"
            f" {settings.warmup_seconds} s warm-up, wrk -t{settings.threads}"
            f" -c{settings.connections}{in_rounds}"
        )
    delivery: Any = None  # webhooks.Report
    delivery_failure: str | None = None
    synced: Any = None  # sync.Report
    sync_failure: str | None = None
    live: Any = None  # live.Report
    live_failure: str | None = None
    try:
        document["versions"].update(server_versions(settings.database_server, settings.redis_url))
        if selected:
            with ExitStack() as stack:
                run = Run(settings, stamp, stack)
                document["seed"] = run.seeded.summary()
                document["response_bytes"] = dict(run.sizes)
                document["dealbase_environment"] = {
                    k: v for k, v in run.dealbase_settings.items() if k != "DEALBASE_DATABASE_URL"
                }
                for number in range(1, settings.rounds + 1):
                    if settings.rounds > 1:
                        say(f"round {number} of {settings.rounds}")
                    rounds.append({})
                    _run_scenarios(run, tools, selected, rounds[-1], document)
                stack.close()
                lines = run.dealbase_log.read_text(errors="replace").count("\n")
                document["dealbase_log"] = {
                    "path": str(run.dealbase_log.relative_to(ROOT)),
                    "lines": lines,
                }
        if with_webhooks:
            delivery, delivery_failure = _deliver_webhooks(settings, stamp)
            document[WEBHOOKS] = (
                delivery.as_dict() if delivery is not None else {"failure": delivery_failure}
            )
        if with_sync:
            synced, sync_failure = _sync(settings, stamp)
            document[SYNC] = synced.as_dict() if synced is not None else {"failure": sync_failure}
        if with_live:
            live, live_failure = _live(settings, stamp)
            document[LIVE] = live.as_dict() if live is not None else {"failure": live_failure}
    finally:
        document["machine"]["load_average_after"] = load_average()
        document["scenarios"] = scenario_records(rounds)
        document["targets"] = [] if settings.without else targets(rounds)
        write_results(results_path, document)
    if rounds:
        print()
        print(table(rounds, settings.seconds))
        print()
        if settings.without:
            print(f"Targets: none measured, the run left out {', '.join(settings.without)}.")
        else:
            print(targets_text(document["targets"], len(rounds)))
    if delivery is not None:
        print()
        print(webhook_tables(delivery))
    if synced is not None:
        print()
        print(sync_tables(synced))
    if live is not None:
        print()
        print(live_tables(live))
    print(f"\nResults: {results_path.relative_to(ROOT)}")
    failed = sorted(
        {name for outcomes in rounds for name, outcome in outcomes.items() if not outcome.ok}
    )
    if failed:
        print(
            f"\nbench: FAILED: {', '.join(failed)}: errors, or no request completed, so no"
            " figures (see above and the results file).",
            file=sys.stderr,
        )
    failed_own = False
    if delivery_failure or (delivery is not None and not delivery.ok):
        problems = [delivery_failure] if delivery_failure else delivery.failures
        print("\nbench: FAILED: webhooks:\n  " + "\n  ".join(problems), file=sys.stderr)
        failed_own = True
    if sync_failure or (synced is not None and not synced.ok):
        problems = [sync_failure] if sync_failure else synced.failures
        print("\nbench: FAILED: sync:\n  " + "\n  ".join(problems), file=sys.stderr)
        failed_own = True
    if live_failure or (live is not None and not live.ok):
        problems = [live_failure] if live_failure else live.failures
        print("\nbench: FAILED: live:\n  " + "\n  ".join(problems), file=sys.stderr)
        failed_own = True
    return 1 if failed or failed_own else 0


def webhook_tables(report: Any) -> str:
    import webhooks

    text: str = webhooks.tables(report)
    return text


def sync_tables(report: Any) -> str:
    import sync

    text: str = sync.tables(report)
    return text


def live_tables(report: Any) -> str:
    import live

    text: str = live.tables(report)
    return text


def _live(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/live.py's measurements, on a scratch database of their own; the report, or why
    there is none."""
    import live

    say(
        f"live: {settings.live_subscribers:,} subscribers on one department,"
        f" {settings.live_rate} writes/s for {settings.seconds} s (bench/live.py)"
    )
    try:
        return live.measure(live.Options(settings, RESULTS / f"{stamp}-logs", stamp)), None
    except (ServiceFailed, ProfileFailed) as exc:
        return None, str(exc)
    except Exception:
        traceback.print_exc()
        return None, "an unexpected error (above)"


def _sync(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/sync.py's measurements, on a scratch database of their own; the report, or why
    there is none."""
    import sync

    say(
        f"sync: {settings.sync_customers:,} customers in batches of {settings.sync_batch},"
        f" {settings.sync_single_count:,} one at a time, {settings.sync_clients} clients"
        " (bench/sync.py)"
    )
    try:
        return sync.measure(sync.Options(settings, RESULTS / f"{stamp}-logs")), None
    except ServiceFailed as exc:
        return None, str(exc)
    except Exception as exc:
        traceback.print_exc()
        return None, f"{type(exc).__name__}: {exc}"


def _deliver_webhooks(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/webhooks.py's measurements, on a scratch database of their own; the report, or
    why there is none."""
    import webhooks  # imports dealbase itself, which the wrk scenarios do not need

    events = settings.webhook_event_count
    say(
        f"webhooks: {events} events per throughput run; {settings.webhook_rate} commits/s for"
        f" {settings.seconds} s for the delay (bench/webhooks.py)"
    )
    options = webhooks.Options(
        server=settings.database_server,
        events=events,
        rate=settings.webhook_rate,
        delay_seconds=settings.seconds,
        logs=RESULTS / f"{stamp}-logs",
        stamp=stamp,
    )
    try:
        return webhooks.measure(options), None
    except (ServiceFailed, ProfileFailed) as exc:
        return None, str(exc)
    except Exception as exc:
        traceback.print_exc()
        return None, f"{type(exc).__name__}: {exc}"


def settle_database(database_url: str, schema: str) -> None:
    """ANALYZE the tenant's tables before each scenario, as autovacuum keeps a database analysed,
    then CHECKPOINT, so that no load pays for the WAL the loads before it wrote.

    The machines this runs on have autovacuum off, so without it the planner would plan the
    reads on the statistics of the seed, before the write scenarios added thousands of rows: a
    page of 50 deals then joined a full scan of the customers where, with current statistics, it
    looks up its own, whichever server asked.

    The write scenarios fill ``max_wal_size`` within a run, so a checkpoint began in some loads
    and not in the load beside them, and a round with one at work read lower than a round
    without (commit 254de27). After its own CHECKPOINT a load of 12 s meets none (the next is
    due 5 minutes later, or a gigabyte on), and each pays the full-page images of the pages it
    changes first, as every load does after a checkpoint in production. A role that may not
    CHECKPOINT (neither superuser nor ``pg_checkpoint``) runs the loads without; the table's
    checkpoint column shows where one began.
    """
    analyze(database_url, schema)
    with (
        psycopg.connect(database_url, autocommit=True) as connection,
        suppress(psycopg.errors.InsufficientPrivilege),
    ):
        connection.execute("CHECKPOINT")


def _run_scenarios(
    run: Run,
    tools: Toolset,
    selected: list[Scenario],
    outcomes: dict[str, Outcome],
    document: dict[str, Any],
) -> None:
    settings = run.settings
    phases: list[tuple[str, list[Scenario]]] = []
    for scenario in selected:
        if phases and phases[-1][0] == scenario.server:
            phases[-1][1].append(scenario)
        else:
            phases.append((scenario.server, [scenario]))
    for server, scenarios in phases:
        service: Service | None = None
        try:
            if server == "baseline":
                service = start_baseline(run.database, settings, run.logs / "baseline.log")
                document.setdefault("response_bytes", {}).update(
                    seeding.check_baseline(service.base_url, run.tenant, run.seeded.customer_ids[0])
                )
            elif server == "postgraphile":
                assert tools.node is not None
                service = start_postgraphile(
                    run.database,
                    run.tenant.schema,
                    tools.node,
                    settings,
                    run.logs / "postgraphile.log",
                )
                document.setdefault("response_bytes", {}).update(
                    seeding.check_postgraphile(service.base_url)
                )
        except (ServiceFailed, seeding.SeedFailed) as exc:
            for scenario in scenarios:
                outcomes[scenario.name] = Outcome(scenario, failure=f"{server}: {exc}")
                report_line(outcomes[scenario.name])
            if service is not None:
                service.stop()
            continue
        try:
            for scenario in scenarios:
                say(f"{scenario.name}: {scenario.what}")
                run_load: Callable[[int], Measurement]
                if scenario.server == "pgbench":
                    assert tools.pgbench is not None
                    load = PgbenchLoad(
                        run.database,
                        run.tenant.schema,
                        run.tenant.key_id,
                        run.tenant.department_id,
                        clients=settings.workers * settings.pool_size,
                        script=scenario.script or "insert_customer.sql",
                        protocol=scenario.pgbench_protocol,
                    )
                    run_load = partial(run_pgbench, tools.pgbench, load, settings)
                else:
                    assert tools.wrk is not None
                    base_url = service.base_url if service else run.dealbase.base_url
                    run_load = partial(
                        run_wrk, tools.wrk, run.wrk_load(scenario, base_url), settings
                    )
                settle_database(run.database, run.tenant.schema)
                served_by = service or (None if scenario.server == "pgbench" else run.dealbase)
                outcome = measure(
                    scenario,
                    run_load,
                    settings,
                    database=run.database,
                    server_pid=served_by.pid if served_by else None,
                )
                outcomes[scenario.name] = outcome
                report_line(outcome)
        finally:
            if service is not None:
                service.stop()


def _profile_files(stamp: str, scenario: str) -> tuple[Path, Path, Path]:
    """The speedscope file, the text summary and py-spy's own output."""
    base = f"{stamp}-profile-{scenario}"
    return (
        RESULTS / f"{base}.speedscope.json",
        RESULTS / f"{base}.txt",
        RESULTS / f"{base}.py-spy.log",
    )


def profile(settings: BenchSettings, name: str) -> int:
    if name not in DEALBASE_SCENARIOS:
        raise UnknownScenario(
            f"profile takes a dealbase scenario: {', '.join(DEALBASE_SCENARIOS)} (not {name!r})"
        )
    scenario = select((name,))[-1]
    wrk = ensure_wrk()
    tools = Toolset(wrk=wrk, py_spy=ensure_py_spy())
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    speedscope, summary, log = _profile_files(stamp, name)
    with ExitStack() as stack:
        run = Run(settings, stamp, stack)
        load = run.wrk_load(scenario, run.dealbase.base_url)
        recording = None

        def start() -> None:
            nonlocal recording
            say(f"py-spy recording dealbase (pid {run.dealbase.pid} and its workers)")
            recording = start_recording(
                tools.py_spy or "py-spy",
                run.dealbase.pid,
                speedscope,
                log,
                gil_only=settings.profile_gil_only,
            )

        say(f"{scenario.name}: {scenario.what}, {settings.seconds} s under py-spy")
        try:
            outcome = measure(
                scenario,
                lambda seconds: run_wrk(wrk, load, settings, seconds),
                settings,
                during=start,
            )
        finally:
            if recording is not None:
                stop_recording(recording)
        report_line(outcome)
        text = summarize(speedscope)
        m = outcome.measurement
        sampled = (
            "samples taken while the thread held the GIL (BENCH_PROFILE_GIL=0: every busy thread)"
            if settings.profile_gil_only
            else "samples of every thread py-spy did not judge idle"
        )
        load_line = (
            f"{m.requests_per_second:,.0f} req/s under the profiler, p50 {m.p50_ms:.1f} ms,"
            f" p99 {m.p99_ms:.1f} ms, {m.errors} errors"
            if m
            else f"no figures: {outcome.failure}"
        )
        heading = "\n".join(
            [
                f"py-spy profile of dealbase, scenario {scenario.name} ({scenario.what}), {stamp}",
                f"{settings.workers} workers, wrk -t{settings.threads} -c{settings.connections}"
                f" for {settings.seconds} s: {load_line}",
                f"{sampled}; load average {outcome.load_average_before} before, "
                f"{outcome.load_average_after} after",
                f"speedscope file: {speedscope.relative_to(ROOT)} (open it in speedscope)",
                "",
                "",
            ]
        )
        summary.write_text(heading + text)
        print()
        print(heading + text)
        say(f"wrote {speedscope.relative_to(ROOT)} and {summary.relative_to(ROOT)}")
        return 0 if outcome.ok else 1


def main() -> int:
    parser = arguments_parser(
        __doc__,
        "Scenarios: " + ", ".join([*(s.name for s in select(())), *OWN_TABLES]),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("bench", help="every scenario (or BENCH_SCENARIOS), one table")
    profiler = commands.add_parser("profile", help="one dealbase scenario under py-spy")
    profiler.add_argument("--scenario", required=True, help=", ".join(DEALBASE_SCENARIOS))
    arguments = parser.parse_args()
    stop_on_sigterm()
    try:
        settings = BenchSettings.from_environment()
        if arguments.command == "profile":
            return profile(settings, arguments.scenario)
        return bench(settings)
    except (SettingsError, UnknownScenario, ToolMissing) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    except (ServiceFailed, seeding.SeedFailed, ProfileFailed, LoadFailed) as exc:
        print(f"bench: FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped, scratch database dropped", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
