"""Custom fields under load (issue 57), each figure beside its peer measured in the same run:

1. `POST /customers` with 20 custom fields beside the same body without them: a tenant with 20
   customer fields of every type (five text, one single select, one multi select, one email,
   two of each other type; none unique or filterable), sent `make bench`'s `POST /customers`
   body with a value for each, beside a tenant without fields sent that body alone. Both by wrk
   (`wrk/post_customers_departments.lua`, the body from a file), the peer first, in each of
   BENCH_ROUNDS rounds. Target: req/s >= 0.8 x without.
2. A list filtered on an indexed custom field beside one filtered on the indexed email: a tenant
   of BENCH_CUSTOM_FIELDS_CUSTOMERS (100,000) customers, each with a distinct email and a
   distinct value of a unique text field `code` (defined through the REST API first, so that its
   column and index exist; the customers inserted in SQL, then ANALYZE). wrk reads `GET
   /customers?custom_fields.code=<v>` and `GET /customers?email=<v>` (`wrk/get_paths.lua`),
   every request another customer's, in the same shuffled order. Target: p99 <= 2 x by email.
3. A field defined and deleted on BENCH_CUSTOM_FIELDS_DDL_CUSTOMERS (1,000,000; 100,000 in a
   quick run, BENCH_SECONDS <= 3) customers while four writers create customers:
   bench/custom_field_ddl.py's measurement. Target: no write during a change waits over 1 s.

    .venv/bin/python bench/custom_fields.py            # the settings of `make bench`
    BENCH_SECONDS=3 .venv/bin/python bench/custom_fields.py --json /tmp/custom_fields.json

`make bench` runs it after bench/live.py (`BENCH_SCENARIOS=custom_fields` runs it alone): the
first two on a scratch database and a `dealbase serve --workers BENCH_WORKERS` of their own,
every production feature on, the third on another (bench/custom_field_ddl.py's). A load with
any error (a non-2xx answer), a setup answer that is not what was sent, or a write of the third
neither 201 nor 503 with Retry-After fails the run (exit 1); a target missed is printed, and the
figures stay.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import custom_field_ddl
import httpx
import psycopg
from harness.console import arguments_parser, sayer
from harness.figures import number
from harness.load import WrkLoad, run_wrk
from harness.measuring import measure as measure_load
from harness.measuring import report_line, settle_database
from harness.paths import RESULTS
from harness.processes import ServiceFailed
from harness.report import (
    Outcome,
    Round,
    median_ratio,
    ratios,
    representative,
    scenario_records,
    table,
)
from harness.scenarios import Scenario
from harness.settings import TARGET_DDL_CUSTOMERS, BenchSettings
from harness.stack import (
    GENEROUS_BURST,
    GENEROUS_RATE,
    REST_PREFIX,
    Tenant,
    analyze,
    dealbase_cli,
    provision,
    scratch_database,
    start_dealbase,
)
from harness.standalone import run_alone, stamp
from harness.tools import ensure_wrk, load_average
from harness.writers import WRITERS
from psycopg import sql

from dealbase.platform.custom_fields.rules import column_name

say = sayer("custom-fields")

POST_PLAIN = "post_customers_no_custom_fields"
POST_FIELDS = "post_customers_20_custom_fields"
BY_EMAIL = "list_customers_by_email"
BY_FIELD = "list_customers_by_custom_field"
MIN_POST_RATIO = 0.8
MAX_P99_RATIO = 2.0
# In the order each round loads them, each right after its peer.
SCENARIOS = (
    Scenario(
        POST_PLAIN,
        "dealbase",
        "POST /customers, a tenant without custom fields",
        "post_customers_departments.lua",
    ),
    Scenario(
        POST_FIELDS,
        "dealbase",
        "POST /customers with a value for each of 20 custom fields",
        "post_customers_departments.lua",
        compare_to=POST_PLAIN,
    ),
    Scenario(
        BY_EMAIL,
        "dealbase",
        "GET /customers?email=<v>, another customer each request",
        "get_paths.lua",
    ),
    Scenario(
        BY_FIELD,
        "dealbase",
        "GET /customers?custom_fields.code=<v> (unique), another customer each request",
        "get_paths.lua",
        compare_to=BY_EMAIL,
    ),
)

# `make bench`'s POST /customers body (wrk/post_customers_departments.lua's own).
CUSTOMER = {
    "last_name": "Lovelace",
    "first_name": "Ada",
    "email": "ada@example.com",
    "company": "Analytical Engines Ltd",
    "city": "London",
}
# The 20 fields, each with its value in the body (a select's: its options, by position).
FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("contract", "text", "C-2026-0001"),
    ("region", "text", "EMEA"),
    ("segment", "text", "Enterprise"),
    ("account_manager", "text", "Grace Hopper"),
    ("notes", "text", "Renews every January; invoices go to the London office."),
    ("seats", "integer", 250),
    ("employees", "integer", 1200),
    ("revenue", "decimal", "1234567.50"),
    ("discount", "decimal", "12.50"),
    ("vip", "boolean", True),
    ("newsletter", "boolean", False),
    ("renewal", "date", "2027-01-31"),
    ("first_order", "date", "2019-06-15"),
    ("signed_at", "timestamp", "2026-12-01T10:00:00.000000Z"),
    ("last_contact_at", "timestamp", "2026-11-28T16:45:30.000000Z"),
    ("tier", "single_select", 0),
    ("channels", "multi_select", [0, 2]),
    ("billing_email", "email", "billing@example.com"),
    ("homepage", "url", "https://example.com/analytical-engines"),
    ("support_url", "url", "https://example.com/analytical-engines/support"),
)
OPTIONS = [{"label": "Gold"}, {"label": "Silver"}, {"label": "Bronze"}]
CODE = "code"
# Customers whose filtered reads are checked before the loads.
CHECKED = 3


class CheckFailed(Exception):
    """A setup request answered otherwise than the run needs."""


def code_of(n: int) -> str:
    return f"K-{n:07d}"


def email_of(n: int) -> str:
    return f"customer{n}@example.com"


def tenant_key(database: str, tenant: Tenant) -> dict[str, str]:
    """A tenant-wide key's headers (fields are defined by such a key alone)."""
    key = dealbase_cli(
        database,
        *("key", "issue", "--tenant", tenant.tenant_id, "--scope", "tenant", "--name", "admin"),
        *("--rate", GENEROUS_RATE, "--burst", GENEROUS_BURST, "--json"),
    )[0]
    return {"X-Api-Key": key["api_key"]}


def define(client: httpx.Client, headers: dict[str, str], body: dict[str, Any]) -> Any:
    response = client.post(f"{REST_PREFIX}/custom-fields", json=body, headers=headers)
    if response.status_code != 201:
        raise CheckFailed(f"defining {body['name']}: {response.status_code} {response.text[:300]}")
    return response.json()


def value_of(kind: str, value: Any, defined: dict[str, Any]) -> Any:
    """One of FIELDS' values in a body: a select's options by the ids ``defined`` gave them."""
    if kind == "single_select":
        return defined["options"][value]["id"]
    if kind == "multi_select":
        return [defined["options"][index]["id"] for index in value]
    return value


def define_fields(client: httpx.Client, headers: dict[str, str]) -> dict[str, Any]:
    """The 20 fields defined; the custom values of the body, by field."""
    values: dict[str, Any] = {}
    for name, kind, value in FIELDS:
        body: dict[str, Any] = {"record": "customer", "name": name, "label": name, "type": kind}
        if kind.endswith("select"):
            body["options"] = OPTIONS
        values[name] = value_of(kind, value, define(client, headers, body))
    return values


def define_fields_by_cli(database: str, tenant: Tenant) -> dict[str, Any]:
    """The 20 fields defined by `dealbase field define`; the custom values of the body."""
    values: dict[str, Any] = {}
    for name, kind, value in FIELDS:
        options = [arg for option in OPTIONS for arg in ("--option", option["label"])]
        defined = dealbase_cli(
            database,
            *("field", "define", "--tenant", tenant.tenant_id, "--record", "customer"),
            *("--name", name, "--label", name, "--type", kind),
            *(options if kind.endswith("select") else ()),
            "--json",
        )[0]
        values[name] = value_of(kind, value, defined)
    return values


def created(client: httpx.Client, tenant: Tenant, body: dict[str, Any]) -> Any:
    """One customer created with ``body``, as the loads will: its JSON."""
    response = client.post(f"{REST_PREFIX}/customers", json=body, headers=tenant.headers)
    if response.status_code != 201:
        raise CheckFailed(f"POST /customers: {response.status_code} {response.text[:300]}")
    return response.json()


def seed(database: str, tenant: Tenant, customers: int) -> None:
    """``customers`` rows in one statement, each with its distinct email and code, as the API
    would have written them; then ANALYZE."""
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "INSERT INTO {} (id, department_id, last_name, email, {}, created_at, updated_at)"
                " SELECT gen_random_uuid(), %s, 'seed-' || n, 'customer' || n || '@example.com',"
                " 'K-' || lpad(n::text, 7, '0'), now(), now() FROM generate_series(1, %s) AS n"
            ).format(sql.Identifier(tenant.schema, "customers"), sql.Identifier(column_name(CODE))),
            [tenant.department_id, customers],
        )
    analyze(database, tenant.schema, ["customers"])


def filtered(client: httpx.Client, tenant: Tenant, path: str, n: int) -> None:
    """``path`` (a list filtered to customer ``n``) answers that customer alone."""
    response = client.get(f"{REST_PREFIX}{path}", headers=tenant.headers)
    found = response.json().get("data") if response.status_code == 200 else None
    if not (
        found
        and len(found) == 1
        and found[0]["email"] == email_of(n)
        and found[0]["custom_fields"] == {CODE: code_of(n)}
    ):
        raise CheckFailed(f"GET {path}: {response.status_code} {response.text[:300]}")


@dataclass(frozen=True)
class Options:
    settings: BenchSettings
    logs: Path


class Bench:
    """The scratch database, its three tenants (without fields, with 20, with the filtered
    customers), dealbase serving it, and each scenario's wrk environment."""

    def __init__(self, options: Options, stack: ExitStack, wrk: str) -> None:
        self.settings = settings = options.settings
        self.logs = options.logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.wrk = wrk
        self.database = stack.enter_context(scratch_database(settings.database_server))
        say(f"scratch database {self.database.rpartition('/')[2]}: migrating, three tenants")
        self.plain = provision(self.database, employees=0, name="plain")
        self.fields = provision(self.database, employees=0, name="fields", migrate=False)
        self.filtered = provision(self.database, employees=0, name="filter", migrate=False)
        self.server, self.environment = start_dealbase(
            self.database, settings, self.logs / "dealbase-custom-fields.log"
        )
        stack.callback(self.server.stop)
        self.client = stack.enter_context(httpx.Client(base_url=self.server.base_url, timeout=600))
        # Each scenario's tenant and wrk environment.
        self.loads: dict[str, tuple[Tenant, dict[str, str]]] = {}

    def _file(self, name: str, text: str) -> str:
        path = self.logs / f"custom-fields-{name}"
        path.write_text(text)
        return str(path)

    def prepare_posts(self) -> None:
        """The 20 fields defined, and one customer created in each tenant as the loads will."""
        say(f"defining {len(FIELDS)} customer fields")
        values = define_fields(self.client, tenant_key(self.database, self.fields))
        with_fields = {**CUSTOMER, "custom_fields": values}
        if created(self.client, self.fields, with_fields).get("custom_fields") != values:
            raise CheckFailed("POST /customers did not answer the custom values sent")
        if "custom_fields" in created(self.client, self.plain, CUSTOMER):
            raise CheckFailed("a customer of a tenant without fields shows custom_fields")
        for name, tenant, body in (
            (POST_PLAIN, self.plain, CUSTOMER),
            (POST_FIELDS, self.fields, with_fields),
        ):
            self.loads[name] = (
                tenant,
                {
                    "BENCH_PREFIX": REST_PREFIX,
                    "BENCH_KEYS_FILE": self._file(f"{name}-keys.txt", tenant.department_keys[0]),
                    "BENCH_BODY_FILE": self._file(f"{name}-body.json", json.dumps(body)),
                },
            )

    def prepare_filters(self) -> None:
        """The unique field `code` defined, the customers seeded, and the paths of the reads."""
        customers = self.settings.custom_fields_customers
        tenant = self.filtered
        define(
            self.client,
            tenant_key(self.database, tenant),
            {"record": "customer", "name": CODE, "label": "Code", "type": "text", "unique": True},
        )
        say(f"seeding {customers:,} customers, each with its email and code")
        seed(self.database, tenant, customers)
        order = list(range(1, customers + 1))
        random.Random(57).shuffle(order)
        paths: dict[str, Callable[[int], str]] = {
            BY_EMAIL: lambda n: f"/customers?email={email_of(n)}",
            BY_FIELD: lambda n: f"/customers?custom_fields.{CODE}={code_of(n)}",
        }
        for name, path in paths.items():
            for n in order[:CHECKED]:
                filtered(self.client, tenant, path(n), n)
            text = "\n".join(path(n) for n in order) + "\n"
            self.loads[name] = (
                tenant,
                {
                    "BENCH_PREFIX": REST_PREFIX,
                    "BENCH_API_KEY": tenant.api_key,
                    "BENCH_DEPARTMENT_ID": tenant.department_id,
                    "BENCH_PATHS_FILE": self._file(f"{name}-paths.txt", text),
                },
            )

    def round(self, outcomes: Round) -> None:
        """Every scenario once, in order, each outcome put in ``outcomes`` as it comes."""
        for scenario in SCENARIOS:
            tenant, environment = self.loads[scenario.name]
            assert scenario.script is not None
            load = WrkLoad(scenario.script, self.server.base_url, environment)
            say(f"{scenario.name}: {scenario.what}")
            settle_database(self.database, tenant.schema)
            outcome = measure_load(
                scenario,
                partial(run_wrk, self.wrk, load, self.settings),
                self.settings,
                database=self.database,
                server_pid=self.server.pid,
            )
            report_line(outcome)
            outcomes[scenario.name] = outcome


# --- the report ---------------------------------------------------------------------------------


def p99_ratio(outcomes: Round) -> float | None:
    """The list's p99 filtered on the custom field over its p99 filtered on the email."""
    mine, theirs = outcomes.get(BY_FIELD), outcomes.get(BY_EMAIL)
    if not (mine and theirs and mine.ok and theirs.ok):
        return None
    assert mine.measurement
    assert theirs.measurement
    return mine.measurement.p99_ms / theirs.measurement.p99_ms


def _median(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


@dataclass
class Report:
    """The rounds of the wrk loads, the field changed under writers (bench/custom_field_ddl.py's
    figures), and ``setup_failures``: why a part has no figures, or not all."""

    settings: dict[str, Any] = field(default_factory=dict)
    load_average: dict[str, Any] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    ddl_customers: int = 0
    ddl: dict[str, Any] | None = None
    setup_failures: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        found = list(self.setup_failures)
        found += [
            f"{name}: {outcome.failure}"
            for name, outcome in representative(self.rounds).items()
            if not outcome.ok
        ]
        return found + [f"ddl: {problem}" for problem in (self.ddl or {}).get("failures", [])]

    @property
    def ok(self) -> bool:
        return not self.failures

    def targets(self) -> list[dict[str, Any]]:
        post = median_ratio(self.rounds, POST_FIELDS, POST_PLAIN)
        p99s = [p99_ratio(outcomes) for outcomes in self.rounds]
        p99 = _median(p99s)
        longest = (self.ddl or {}).get("longest_write_during_changes_ms")
        max_ms = custom_field_ddl.MAX_WRITE_MS
        return [
            {
                "target": f"POST /customers, 20 custom fields >= {MIN_POST_RATIO:g} x none",
                "value": post,
                "rounds": ratios(self.rounds, POST_FIELDS, POST_PLAIN),
                "met": None if post is None else post >= MIN_POST_RATIO,
            },
            {
                "target": f"list by a custom field: p99 <= {MAX_P99_RATIO:g} x by email",
                "value": p99,
                "rounds": p99s,
                "met": None if p99 is None else p99 <= MAX_P99_RATIO,
            },
            {
                "target": f"a field changed on {self.ddl_customers:,} customers under"
                f" {WRITERS} writers: longest write <= {max_ms:,.0f} ms",
                "value": longest,
                "customers": self.ddl_customers,
                "met": None if longest is None else longest <= max_ms,
            },
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "load_average": self.load_average,
            "scenarios": scenario_records(self.rounds),
            "targets": self.targets(),
            "ddl": self.ddl,
            "failures": self.failures,
        }


def _ddl_table(report: Report) -> list[str]:
    ddl = report.ddl
    if ddl is None:
        return []
    rows = [
        f"| a field on {report.ddl_customers:,} customers, {WRITERS} writers | seconds |"
        " writes | writes/s | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "defining": "defining it (its column, then its unique index, built concurrently)",
        "deleting": "archiving and deleting it",
    }
    for part in custom_field_ddl.PARTS:
        window = ddl.get(part, {})
        rows.append(
            f"| {labels.get(part, part)} | {number(window.get('seconds'), 2)} |"
            f" {number(window.get('created'))} | {number(window.get('writes_per_second'), 1)} |"
            f" {number(window.get('p50_ms'), 1)} | {number(window.get('p99_ms'), 1)} |"
            f" {number(window.get('max_ms'), 1)} |"
        )
    rows.append(
        f"\nthe writers' answers: {ddl.get('statuses')}; rows answered 201 but not stored:"
        f" {ddl.get('rows_lost')}"
    )
    return rows


def _targets_text(report: Report) -> list[str]:
    rounds = len(report.rounds)
    measured = "in this run" if rounds <= 1 else f"in this run, medians of {rounds} rounds"
    lines = [f"Targets (custom fields, measured {measured}):"]
    for check in report.targets():
        verdict = {True: "met", False: "MISSED", None: "not measured"}[check["met"]]
        value = check["value"]
        shown = f"{number(value)} ms" if "customers" in check else number(value, 2)
        if len(check.get("rounds", ())) > 1:
            shown += f" ({', '.join(number(each, 2) for each in check['rounds'])})"
        lines.append(f"  {check['target']:<70} {shown}  {verdict}")
    if 0 < report.ddl_customers < TARGET_DDL_CUSTOMERS:
        lines.append(
            f"  (the field was changed on {report.ddl_customers:,} customers, fewer than the"
            f" target's {TARGET_DDL_CUSTOMERS:,}: a quick run, BENCH_SECONDS <= 3, or"
            " BENCH_CUSTOM_FIELDS_DDL_CUSTOMERS)"
        )
    return lines


def tables(report: Report) -> str:
    lines: list[str] = []
    if report.rounds:
        lines += [table(report.rounds, report.settings.get("seconds")), ""]
        shown = representative(report.rounds)
        lines.append(
            f"the lists, over {report.settings.get('customers', 0):,} customers: p99"
            f" {_p99(shown.get(BY_FIELD))} ms by custom field, {_p99(shown.get(BY_EMAIL))} ms by"
            " email"
        )
        lines.append("")
    ddl = _ddl_table(report)
    if ddl:
        lines += [*ddl, ""]
    lines += _targets_text(report)
    loads = report.load_average
    lines.append(
        f"load average (1, 5, 15 min): {loads.get('before')} before, {loads.get('after')} after"
    )
    return "\n".join(lines)


def _p99(outcome: Outcome | None) -> str:
    m = outcome.measurement if outcome and outcome.ok else None
    return number(m.p99_ms, 1) if m else "—"


# --- the run ------------------------------------------------------------------------------------


def _guarded(report: Report, part: str, step: Callable[[], None]) -> None:
    """``step``; an error of a setup request or any other is the report's failure, so that the
    other parts still run."""
    try:
        step()
    except CheckFailed as exc:
        report.setup_failures.append(f"{part}: {exc}")
    except (httpx.HTTPError, psycopg.Error, RuntimeError, ServiceFailed) as exc:
        traceback.print_exc()
        report.setup_failures.append(f"{part}: {type(exc).__name__}: {exc}")


def _loads(options: Options, report: Report) -> None:
    settings = options.settings
    with ExitStack() as stack:
        bench = Bench(options, stack, ensure_wrk())
        report.settings["dealbase_environment"] = {
            k: v for k, v in bench.environment.items() if k != "DEALBASE_DATABASE_URL"
        }
        bench.prepare_posts()
        bench.prepare_filters()
        for number_ in range(1, settings.rounds + 1):
            if settings.rounds > 1:
                say(f"round {number_} of {settings.rounds}")
            report.rounds.append({})
            bench.round(report.rounds[-1])


def _ddl(options: Options, report: Report) -> None:
    say(f"a field added and removed on {report.ddl_customers:,} customers under {WRITERS} writers")
    report.ddl = custom_field_ddl.measure(options.settings, report.ddl_customers, options.logs)


def measure(options: Options) -> Report:
    settings = options.settings
    report = Report(
        settings={
            "seconds": settings.seconds,
            "rounds": settings.rounds,
            "customers": settings.custom_fields_customers,
            "fields": len(FIELDS),
            "connections": settings.connections,
            "workers": settings.workers,
        },
        load_average={"before": load_average()},
        ddl_customers=settings.custom_fields_ddl_count,
    )
    _guarded(report, "loads", lambda: _loads(options, report))
    _guarded(report, "ddl", lambda: _ddl(options, report))
    report.load_average["after"] = load_average()
    return report


def main() -> int:
    parser = arguments_parser(
        __doc__,
        "Settings: BENCH_CUSTOM_FIELDS_CUSTOMERS, BENCH_CUSTOM_FIELDS_DDL_CUSTOMERS, BENCH_SECONDS,"
        " BENCH_ROUNDS, BENCH_WORKERS, BENCH_CONNECTIONS (bench/README.md).",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args()
    run = stamp()
    return run_alone(
        "custom_fields",
        lambda: measure(Options(BenchSettings.from_environment(), RESULTS / f"{run}-logs")),
        tables,
        arguments.json,
    )


if __name__ == "__main__":
    sys.exit(main())
