"""Defining and deleting a custom field on a table of a million customers while four writers
create customers in it: how long each change takes, and the longest any write waited.

    .venv/bin/python bench/custom_field_ddl.py                  # 1,000,000 customers
    .venv/bin/python bench/custom_field_ddl.py --customers 100000

On a scratch database of its own, served by `dealbase serve` as `make bench` serves it: one
tenant whose customers are seeded in SQL, then four writers POST /customers one after another.
After a quiet period, a tenant-wide key defines a unique and filterable text field (its column
added, then its index built concurrently), then archives and deletes it. Every write's latency
is kept: before the changes, during each, and after. The target (issue 57): no write waits more
than 1 s. Writes bench/results/custom-field-ddl-<date>.json. `make bench` measures the same
through `measure()` (bench/custom_fields.py, its third part).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.console import arguments_parser, sayer
from harness.paths import RESULTS
from harness.settings import BenchSettings
from harness.stack import REST_PREFIX, analyze, dealbase_cli, scratch_database, start_dealbase
from harness.tools import close_results, results_header
from harness.writers import WRITERS, Answer, Writers, WriterTenant, checked, window

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.tenancy.registry.tenants import create_tenant

say = sayer("custom-field-ddl")
FIELD = {
    "record": "customer",
    "name": "contract_number",
    "label": "Contract number",
    "type": "text",
    "unique": True,
    "filterable": True,
}


def seed(url: str, schema: str, department_id: str, customers: int) -> None:
    """``customers`` rows in one statement, as the API would have written them."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "INSERT INTO {} (id, department_id, last_name, created_at, updated_at)"
                " SELECT gen_random_uuid(), %s, 'seed-' || n, now(), now()"
                " FROM generate_series(1, %s) AS n"
            ).format(sql.Identifier(schema, "customers")),
            [department_id, customers],
        )
    analyze(url, schema, ["customers"])


def timed(
    client: httpx.Client, method: str, path: str, headers: dict[str, str], **body: Any
) -> tuple[httpx.Response, float, float]:
    started = time.monotonic()
    response = client.request(method, f"{REST_PREFIX}{path}", headers=headers, **body)
    return response, started, time.monotonic()


# The target (issue 57): no write waits longer while a field is defined or deleted.
MAX_WRITE_MS = 1000.0
PARTS = ("before", "defining", "between", "deleting", "after")


def make_tenant(url: str) -> tuple[WriterTenant, str]:
    """The tenant of the run, made on the migrated database at ``url``: its writers' department
    and key, and a tenant-wide key (which alone defines fields)."""
    database = Database(url, pool_size=2)
    try:
        tenant = create_tenant(database, "ddl")
        department = admin.create_department(database, tenant.id, "Sales")
        key = admin.issue_key(database, tenant.id, department.id, "writer").api_key
        admin_key = admin.issue_key(database, tenant.id, None, "admin").api_key
    finally:
        database.dispose()
    return WriterTenant(tenant.schema, key, str(department.id)), admin_key


@dataclass
class Changes:
    """When the field was defined and deleted (time.monotonic), and any change refused."""

    quiet: float = 0.0
    define: tuple[float, float] = (0.0, 0.0)
    delete: tuple[float, float] = (0.0, 0.0)
    after_end: float = 0.0
    failures: list[str] = field(default_factory=list)


def change(client: httpx.Client, headers: dict[str, str], seconds: int) -> Changes:
    """After ``seconds`` of quiet, the field defined; ``seconds`` later archived and deleted;
    then ``seconds`` more."""
    changes = Changes(quiet=time.monotonic())
    time.sleep(seconds)
    say("defining the field")
    defined, define_start, define_end = timed(client, "POST", "/custom-fields", headers, json=FIELD)
    changes.define = (define_start, define_end)
    if defined.status_code != 201:
        changes.failures.append(f"define: {defined.status_code} {defined.text[:300]}")
        changes.delete = (define_end, define_end)
        changes.after_end = define_end
        return changes
    field_id = defined.json()["id"]
    time.sleep(seconds)
    say("archiving and deleting it")
    archived, delete_start, _ = timed(
        client, "PATCH", f"/custom-fields/{field_id}", headers, json={"archived": True}
    )
    deleted, _, delete_end = timed(client, "DELETE", f"/custom-fields/{field_id}", headers)
    changes.delete = (delete_start, delete_end)
    if (archived.status_code, deleted.status_code) != (200, 204):
        changes.failures.append(
            f"delete: {archived.status_code} {deleted.status_code} {deleted.text[:300]}"
        )
    time.sleep(seconds)
    changes.after_end = time.monotonic()
    return changes


def figures_of(changes: Changes, answers: list[Answer]) -> dict[str, Any]:
    """How long each change took, and the writes before, during, between and after them."""
    answers = sorted(answers, key=lambda a: a.ended)
    bounds = (changes.quiet, *changes.define, *changes.delete, changes.after_end)
    figures: dict[str, Any] = {
        "define_seconds": round(changes.define[1] - changes.define[0], 2),
        "delete_seconds": round(changes.delete[1] - changes.delete[0], 2),
    }
    for part, start, end in zip(PARTS, bounds, bounds[1:], strict=False):
        figures[part] = window(answers, start, end)
    longest = max(figures[part].get("max_ms", 0) for part in ("defining", "deleting"))
    figures["longest_write_during_changes_ms"] = longest
    return figures


def measure(settings: BenchSettings, customers: int, logs: Path) -> dict[str, Any]:
    """A scratch database and `dealbase serve` of its own, ``customers`` seeded, then the field
    defined and deleted under WRITERS writers: the figures, ``failures`` among them (a change
    refused, a write neither 201 nor 503 with Retry-After, a row lost), and whether the target
    was met (``target_met``: no failure, and no write during a change longer than MAX_WRITE_MS)."""
    logs.mkdir(parents=True, exist_ok=True)
    with scratch_database(settings.database_server) as url:
        dealbase_cli(url, "migrate", "--json")
        writer, admin_key = make_tenant(url)
        say(f"seeding {customers:,} customers")
        seed(url, writer.schema, writer.department_id, customers)
        service, _ = start_dealbase(url, settings, logs / "dealbase-custom-field-ddl.log")
        try:
            with (
                Writers(service.base_url, [[writer]] * WRITERS, "ddl") as writers,
                httpx.Client(base_url=service.base_url, timeout=600) as client,
            ):
                time.sleep(1)  # the writers' first requests (connections, a warm server)
                changes = change(client, {"X-Api-Key": admin_key}, settings.seconds)
        finally:
            service.stop()
        figures = figures_of(changes, writers.answers)
        answers_figures, answers_failures, _ = checked(writers.answers, url, "ddl")
    figures.update(answers_figures)
    figures["failures"] = changes.failures + answers_failures
    figures["target_met"] = (
        figures["longest_write_during_changes_ms"] <= MAX_WRITE_MS and not figures["failures"]
    )
    return figures


def lines(customers: int, figures: dict[str, Any]) -> list[str]:
    """The figures as the CLI prints them."""
    return [
        f"{customers} customers, {WRITERS} writers",
        f"define (column, then unique index built concurrently): {figures['define_seconds']} s",
        f"archive and delete: {figures['delete_seconds']} s",
        *(f"{part}: {figures[part]}" for part in PARTS),
        f"longest write during the changes: {figures['longest_write_during_changes_ms']} ms"
        f" (target: at most {MAX_WRITE_MS:,.0f} ms) {'met' if figures['target_met'] else 'MISSED'}",
        *figures["failures"],
    ]


def main() -> int:
    parser = arguments_parser(__doc__)
    parser.add_argument("--customers", type=int, default=1_000_000)
    arguments = parser.parse_args()
    settings = BenchSettings.from_environment()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    figures = results_header(stamp, customers=arguments.customers, writers=WRITERS)
    figures.update(
        measure(settings, arguments.customers, RESULTS / f"custom-field-ddl-{stamp}-logs")
    )
    close_results(
        "custom-field-ddl", stamp, figures, "\n".join(lines(arguments.customers, figures))
    )
    return 0 if figures["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
