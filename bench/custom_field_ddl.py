"""Defining and deleting a custom field on a table of a million customers while four writers
create customers in it: how long each change takes, and the longest any write waited.

    .venv/bin/python bench/custom_field_ddl.py                  # 1,000,000 customers
    .venv/bin/python bench/custom_field_ddl.py --customers 100000

On a scratch database of its own, served by `dealbase serve` as `make bench` serves it: one
tenant whose customers are seeded in SQL, then four writers POST /customers one after another.
After a quiet period, a tenant-wide key defines a unique and filterable text field (its column
added, then its index built concurrently), then archives and deletes it. Every write's latency
is kept: before the changes, during each, and after. The target (issue 57): no write waits more
than 1 s. Writes bench/results/custom-field-ddl-<date>.json.
"""

from __future__ import annotations

import sys
import time
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
from harness.writers import WRITERS, Writers, WriterTenant, checked, window

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


def main() -> int:
    parser = arguments_parser(__doc__)
    parser.add_argument("--customers", type=int, default=1_000_000)
    arguments = parser.parse_args()
    settings = BenchSettings.from_environment()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    figures = results_header(stamp, customers=arguments.customers, writers=WRITERS)
    RESULTS.mkdir(exist_ok=True)
    logs = RESULTS / f"custom-field-ddl-{stamp}-logs"
    logs.mkdir(parents=True)
    failures: list[str] = []
    with scratch_database(settings.database_server) as url:
        dealbase_cli(url, "migrate", "--json")
        database = Database(url, pool_size=2)
        try:
            tenant = create_tenant(database, "ddl")
            department = admin.create_department(database, tenant.id, "Sales")
            key = admin.issue_key(database, tenant.id, department.id, "writer").api_key
            admin_key = admin.issue_key(database, tenant.id, None, "admin").api_key
        finally:
            database.dispose()
        say(f"seeding {arguments.customers} customers")
        seed(url, tenant.schema, str(department.id), arguments.customers)
        writer = WriterTenant(tenant.schema, key, str(department.id))
        headers = {"X-Api-Key": admin_key}
        service, _ = start_dealbase(url, settings, logs / "dealbase.log")
        try:
            with (
                Writers(service.base_url, [[writer]] * WRITERS, "ddl") as writers,
                httpx.Client(base_url=service.base_url, timeout=600) as client,
            ):
                time.sleep(1)  # the writers' first requests (connections, a warm server)
                quiet = time.monotonic()
                time.sleep(settings.seconds)
                say("defining the field")
                defined, define_start, define_end = timed(
                    client, "POST", "/custom-fields", headers, json=FIELD
                )
                if defined.status_code != 201:
                    failures.append(f"define: {defined.status_code} {defined.text[:300]}")
                field_id = defined.json().get("id")
                time.sleep(settings.seconds)
                say("archiving and deleting it")
                archived, delete_start, _ = timed(
                    client, "PATCH", f"/custom-fields/{field_id}", headers, json={"archived": True}
                )
                deleted, _, delete_end = timed(
                    client, "DELETE", f"/custom-fields/{field_id}", headers
                )
                if (archived.status_code, deleted.status_code) != (200, 204):
                    failures.append(
                        f"delete: {archived.status_code} {deleted.status_code} {deleted.text[:300]}"
                    )
                time.sleep(settings.seconds)
                after_end = time.monotonic()
        finally:
            service.stop()
        answers = sorted(writers.answers, key=lambda a: a.ended)
        figures.update(
            define_seconds=round(define_end - define_start, 2),
            delete_seconds=round(delete_end - delete_start, 2),
            before=window(answers, quiet, define_start),
            defining=window(answers, define_start, define_end),
            between=window(answers, define_end, delete_start),
            deleting=window(answers, delete_start, delete_end),
            after=window(answers, delete_end, after_end),
        )
        answers_figures, answers_failures, _ = checked(answers, url, "ddl")
        figures.update(answers_figures)
        failures += answers_failures
    longest = max((figures[part].get("max_ms", 0) for part in ("defining", "deleting")), default=0)
    figures["longest_write_during_changes_ms"] = longest
    figures["target_met"] = longest <= 1000 and not failures
    figures["failures"] = failures
    lines = [
        f"{arguments.customers} customers, {WRITERS} writers",
        f"define (column, then unique index built concurrently): {figures['define_seconds']} s",
        f"archive and delete: {figures['delete_seconds']} s",
        *(
            f"{part}: {figures[part]}"
            for part in ("before", "defining", "between", "deleting", "after")
        ),
        f"longest write during the changes: {longest} ms (target: at most 1,000 ms)"
        f" {'met' if figures['target_met'] else 'MISSED'}",
        *failures,
    ]
    close_results("custom-field-ddl", stamp, figures, "\n".join(lines))
    return 0 if figures["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
