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

After the wrk scenarios, bench runs its parts (PARTS), each on a scratch database of its own,
alone when BENCH_SCENARIOS names it alone: bench/webhooks.py (webhook delivery by one `dealbase
worker`, beside plain httpx), bench/sync.py (a nightly sync of customers upserted in batches by
external id, beside the same sync one customer a request), bench/live.py (1,000 GraphQL
subscriptions on one department under 50 writes a second: the delay from each commit to each
subscriber) and bench/custom_fields.py (POST /customers with 20 custom fields, a list filtered
on one, a field added under writers, each beside its peer). Each part's tables follow the
targets, its figures go into the results file under its name, and its failure (an event lost,
an answer or a row not what was sent) fails the run.

profile: the same setup for dealbase alone, one scenario under load while py-spy records the
server's worker processes; writes a speedscope file and a text summary to bench/results/.

Settings come from the environment; bench/README.md lists them.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from harness import seed as seeding
from harness.console import arguments_parser, sayer
from harness.load import LoadFailed, Measurement, PgbenchLoad, WrkLoad, run_pgbench, run_wrk
from harness.measuring import measure, report_line, settle_database
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
    OWN_TABLES,
    Scenario,
    UnknownScenario,
    select,
    wants,
)
from harness.settings import BenchSettings, SettingsError
from harness.stack import (
    REST_PREFIX,
    Tenant,
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
from parts import PARTS, Part

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


def bench(settings: BenchSettings) -> int:
    selected = select(settings.scenarios)
    parts = [part for part in PARTS if wants(settings.scenarios, part.name)]
    tools = _tools(selected)
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
    reports: dict[str, tuple[Any, str | None]] = {}
    try:
        document["versions"].update(server_versions(settings.database_server, settings.redis_url))
        if selected:
            _wrk_scenarios(settings, stamp, tools, selected, rounds, document)
        for part in parts:
            report, failure = reports[part.name] = part.measure(settings, stamp)
            document[part.name] = report.as_dict() if report is not None else {"failure": failure}
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
    for part in parts:
        report = reports[part.name][0]
        if report is not None:
            print()
            print(part.tables(report))
    print(f"\nResults: {results_path.relative_to(ROOT)}")
    return 1 if _failed(rounds, parts, reports) else 0


def _tools(selected: list[Scenario]) -> Toolset:
    """What the selected scenarios load with (or serve with), installed when missing."""
    servers = {scenario.server for scenario in selected}
    tools = Toolset(
        wrk=ensure_wrk() if selected else None,
        pgbench=ensure_pgbench() if "pgbench" in servers else None,
        node=(node := ensure_node()) if "postgraphile" in servers else None,
    )
    if tools.node:
        tools = Toolset(tools.wrk, tools.pgbench, tools.node, ensure_postgraphile(node))
    return tools


def _wrk_scenarios(
    settings: BenchSettings,
    stamp: str,
    tools: Toolset,
    selected: list[Scenario],
    rounds: list[Round],
    document: dict[str, Any],
) -> None:
    """The wrk and pgbench scenarios on the run's stack, each round's outcomes added to
    ``rounds``."""
    in_rounds = f", in {settings.rounds} rounds" if settings.rounds > 1 else ""
    say(
        f"{len(selected)} scenarios, {settings.seconds} s each after a"
        f" {settings.warmup_seconds} s warm-up, wrk -t{settings.threads}"
        f" -c{settings.connections}{in_rounds}"
    )
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
        document["dealbase_log"] = {"path": str(run.dealbase_log.relative_to(ROOT)), "lines": lines}


def _failed(
    rounds: list[Round], parts: list[Part], reports: dict[str, tuple[Any, str | None]]
) -> bool:
    """Whether the run failed (a scenario, or a part: each printed); a target missed is not a
    failure."""
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
    for part in parts:
        report, failure = reports[part.name]
        if failure or (report is not None and not report.ok):
            problems = [failure] if failure else report.failures
            print(f"\nbench: FAILED: {part.name}:\n  " + "\n  ".join(problems), file=sys.stderr)
            failed_own = True
    return bool(failed) or failed_own


def _start_peer(server: str, run: Run, tools: Toolset, document: dict[str, Any]) -> Service | None:
    """The server of a phase of peers (the baseline, PostGraphile), checked to answer the seed
    whole; None for dealbase (serving the whole run) and pgbench (no server)."""
    settings = run.settings
    if server == "baseline":
        service = start_baseline(run.database, settings, run.logs / "baseline.log")
        try:
            document.setdefault("response_bytes", {}).update(
                seeding.check_baseline(service.base_url, run.tenant, run.seeded.customer_ids[0])
            )
        except seeding.SeedFailed:
            service.stop()
            raise
        return service
    if server == "postgraphile":
        assert tools.node is not None
        service = start_postgraphile(
            run.database, run.tenant.schema, tools.node, settings, run.logs / "postgraphile.log"
        )
        try:
            document.setdefault("response_bytes", {}).update(
                seeding.check_postgraphile(service.base_url)
            )
        except seeding.SeedFailed:
            service.stop()
            raise
        return service
    return None


def _load(
    run: Run, tools: Toolset, scenario: Scenario, service: Service | None
) -> Callable[[int], Measurement]:
    """The scenario's load: pgbench on the database, or wrk on its server."""
    settings = run.settings
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
        return partial(run_pgbench, tools.pgbench, load, settings)
    assert tools.wrk is not None
    base_url = service.base_url if service else run.dealbase.base_url
    return partial(run_wrk, tools.wrk, run.wrk_load(scenario, base_url), settings)


def _run_scenarios(
    run: Run,
    tools: Toolset,
    selected: list[Scenario],
    outcomes: dict[str, Outcome],
    document: dict[str, Any],
) -> None:
    phases: list[tuple[str, list[Scenario]]] = []
    for scenario in selected:
        if phases and phases[-1][0] == scenario.server:
            phases[-1][1].append(scenario)
        else:
            phases.append((scenario.server, [scenario]))
    for server, scenarios in phases:
        try:
            service = _start_peer(server, run, tools, document)
        except (ServiceFailed, seeding.SeedFailed) as exc:
            for scenario in scenarios:
                outcomes[scenario.name] = Outcome(scenario, failure=f"{server}: {exc}")
                report_line(outcomes[scenario.name])
            continue
        try:
            for scenario in scenarios:
                say(f"{scenario.name}: {scenario.what}")
                run_load = _load(run, tools, scenario, service)
                settle_database(run.database, run.tenant.schema)
                served_by = service or (None if scenario.server == "pgbench" else run.dealbase)
                outcome = measure(
                    scenario,
                    run_load,
                    run.settings,
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


def _profile_heading(
    settings: BenchSettings, scenario: Scenario, stamp: str, outcome: Outcome, speedscope: Path
) -> str:
    """What the profile's summary opens with: the scenario, its load's figures, what a sample is."""
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
    lines = [
        f"py-spy profile of dealbase, scenario {scenario.name} ({scenario.what}), {stamp}",
        f"{settings.workers} workers, wrk -t{settings.threads} -c{settings.connections}"
        f" for {settings.seconds} s: {load_line}",
        f"{sampled}; load average {outcome.load_average_before} before, "
        f"{outcome.load_average_after} after",
        f"speedscope file: {speedscope.relative_to(ROOT)} (open it in speedscope)",
        "",
        "",
    ]
    return "\n".join(lines)


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
        heading = _profile_heading(settings, scenario, stamp, outcome, speedscope)
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
