"""The commands outside the groups: ``migrate``, ``demo``, the documents the code defines
(``openapi``, ``graphql-schema``), and the processes (``serve``, ``worker``)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Annotated

import orjson
import typer
import uvicorn

from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.migrations.runner import (
    TenantMigration,
    schemas_behind,
    upgrade_control,
    upgrade_tenants,
)
from dealbase.ops import admin, serving
from dealbase.ops.cli.common import (
    JsonFlag,
    cli,
    command_database,
    command_settings,
    emit,
    fail_cleanly,
)
from dealbase.ops.embedded_postgres import database_url_of
from dealbase.ops.metrics_files import prepare_metrics_dir
from dealbase.tenancy.registry.tenants import list_tenants
from dealbase.tenancy.roles import inheriting_login_role
from dealbase.worker.limits import WorkerLimits


@cli.command()
@fail_cleanly
def migrate(
    as_json: JsonFlag = False,
    concurrency: Annotated[
        int | None, typer.Option(min=1, max=64, help="Tenants at a time.")
    ] = None,
    every_tenant: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Visit every tenant schema, not only those recorded as behind: read each one's"
            " own revision and put its role and grants back in order.",
        ),
    ] = False,
) -> None:
    """Bring the control schema and every tenant schema to head (resumable; safe to re-run)."""
    settings = command_settings()
    database = command_database(settings)
    with database.control() as connection:
        upgrade_control(connection, distributed=settings.citus_schema_sharding)
    with database.control() as connection:
        live = [tenant.schema for tenant in list_tenants(connection)]
        schemas = live if every_tenant else schemas_behind(connection)
    results = _upgrade_with_progress(
        database,
        schemas,
        concurrency or settings.migrate_concurrency,
        distributed=settings.citus_schema_sharding,
        show=not as_json,
    )
    any_failed = _report_migrations(as_json, len(live), results)
    _warn_of_an_inheriting_login_role(database)
    if any_failed:
        raise typer.Exit(1)


def _report_migrations(as_json: bool, tenant_count: int, results: list[TenantMigration]) -> bool:
    """Prints what the run did (the repairs too, without --json) and each failure on stderr;
    returns whether any tenant schema failed."""
    failed = sorted((r for r in results if not r.ok), key=lambda r: r.schema)
    repaired = sorted((r for r in results if r.repairs), key=lambda r: r.schema)
    summary = {
        "tenants": tenant_count,
        # The schemas this run upgraded or checked; the others recorded the head already.
        "visited": len(results),
        "migrated": tenant_count - len(failed),
        "failed": [{"schema": r.schema, "error": r.error} for r in failed],
        # Tenant roles created and grants put back as they should be (docs/security.md).
        "repaired": [{"schema": r.schema, "repairs": list(r.repairs)} for r in repaired],
    }
    emit(
        as_json,
        summary,
        f"control schema and {summary['migrated']}/{tenant_count} tenant schemas at head"
        f" ({len(results)} visited)",
    )
    if not as_json:
        for result in repaired:
            for repair in result.repairs:
                typer.echo(f"repaired tenant schema {result.schema}: {repair}")
    for result in failed:
        typer.echo(f"error: tenant schema {result.schema} failed: {result.error}", err=True)
    return bool(failed)


def _warn_of_an_inheriting_login_role(database: Database) -> None:
    with database.control() as connection:
        inheriting = inheriting_login_role(connection)
    if inheriting:
        typer.echo(
            f"warning: the login role {inheriting} inherits the privileges of every tenant role;"
            f" make it NOINHERIT (ALTER ROLE {inheriting} NOINHERIT), docs/security.md",
            err=True,
        )


def _upgrade_with_progress(
    database: Database, schemas: list[str], concurrency: int, *, distributed: bool, show: bool
) -> list[TenantMigration]:
    if not (show and sys.stderr.isatty() and schemas):
        return upgrade_tenants(
            database.url, schemas, concurrency=concurrency, distributed=distributed
        )
    from rich.progress import Progress

    with Progress(transient=False) as progress:
        task = progress.add_task("tenant schemas", total=len(schemas))
        return upgrade_tenants(
            database.url,
            schemas,
            concurrency=concurrency,
            distributed=distributed,
            on_done=lambda _: progress.advance(task),
        )


@cli.command()
@fail_cleanly
def demo(as_json: JsonFlag = False) -> None:
    """Ensure the demo tenant, department, employee and key, and print them with a curl example."""
    settings = command_settings()
    database = command_database(settings)
    found = admin.ensure_demo(
        database, settings.data_dir, distributed=settings.citus_schema_sharding
    )
    base_url = f"http://{settings.host}:{settings.port}"
    curl = (
        f"curl -i -X POST {base_url}/api/v1/integration/customers "
        f"-H 'Content-Type: application/json' -H 'X-Api-Key: {found.key.api_key}' "
        f"-H 'X-Department-Id: {found.department.id}' -d '{{\"last_name\": \"Lovelace\"}}'"
    )
    value = {
        "tenant_id": found.tenant.id,
        "department_id": found.department.id,
        "employee_id": found.employee.id,
        "key_id": found.key.key_id,
        "api_key": found.key.api_key,
        "base_url": base_url,
        "curl": curl,
    }
    human = "\n".join(
        [
            f"demo tenant:     {found.tenant.id}",
            f"department:      {found.department.id} ({found.department.name})",
            f"employee:        {found.employee.id} ({found.employee.name})",
            f"X-Api-Key:       {found.key.api_key}",
            f"X-Department-Id: {found.department.id}",
            "",
            "Create a customer:",
            f"  {curl}",
        ]
    )
    emit(as_json, value, human)


@cli.command("openapi")
@fail_cleanly
def openapi_document() -> None:
    """Print the OpenAPI document (kept in openapi.json at the repository's root)."""
    from dealbase.app import create_app

    app = create_app(Settings(database_url="postgresql://unused@localhost/unused"))
    sys.stdout.write(orjson.dumps(app.openapi(), option=orjson.OPT_INDENT_2).decode() + "\n")


@cli.command("graphql-schema")
@fail_cleanly
def graphql_schema() -> None:
    """Print the GraphQL schema as SDL (kept in src/dealbase/graphql_api/schema.graphql)."""
    from dealbase.graphql_api.schema import build_schema

    typer.echo(build_schema(Settings(database_url=None)).as_str())


# Above what a worker's requests in flight hold at once (Settings.gc_young_threshold).
SERVER_GC_YOUNG_THRESHOLD = 10_000


@cli.command()
@fail_cleanly
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind (DEALBASE_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (DEALBASE_PORT).")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Server processes.")] = 1,
) -> None:
    """Serve the API with uvicorn."""
    settings = command_settings()
    _hand_settings_to_server_workers(settings)
    # Before prometheus_client is first imported: it picks its kind of values then.
    metrics_dir = prepare_metrics_dir()
    if settings.metrics_port is not None:
        _serve_metrics(settings.metrics_port, host or settings.host)
    # uvicorn handles SIGTERM itself (a graceful shutdown), then raises it again to the handler
    # it found: this one ends the process normally, so that exit handlers run (the embedded
    # PostgreSQL stops) instead of the signal killing it.
    signal.signal(signal.SIGTERM, _exit_normally)
    try:
        serving.run(_server_config(settings, host, port, workers), settings.write_timeout_seconds)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _hand_settings_to_server_workers(settings: Settings) -> None:
    """Worker processes build their app from the environment: hand them the resolved database,
    so only this process owns the embedded server, and the garbage collector's settings of a
    server."""
    os.environ["DEALBASE_DATABASE_URL"] = database_url_of(settings)
    # A worker is one app for its whole life: what it holds once started stays (config.py).
    os.environ.setdefault("DEALBASE_FREEZE_STARTUP_OBJECTS", "true")
    os.environ.setdefault("DEALBASE_GC_YOUNG_THRESHOLD", str(SERVER_GC_YOUNG_THRESHOLD))


def _serve_metrics(port: int, host: str) -> None:
    """GET /metrics on a port of its own, summed over the server's workers."""
    from prometheus_client import start_http_server

    from dealbase.ops.metrics import multiprocess_registry

    registry = multiprocess_registry()
    assert registry is not None, "prepare_metrics_dir set PROMETHEUS_MULTIPROC_DIR"
    start_http_server(port, addr=host, registry=registry)


def _server_config(
    settings: Settings, host: str | None, port: int | None, workers: int
) -> uvicorn.Config:
    # Here, not at the top: the other commands need not wait for the GraphQL API to import.
    from dealbase.graphql_api.live.protocol import MAX_MESSAGE_BYTES

    return uvicorn.Config(
        "dealbase.app:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level=settings.log_level,
        # uvicorn's lines go through our logging (ops.observability), not its format.
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=settings.shutdown_timeout_seconds,
        # A WebSocket message is refused as its frames arrive once past the app's own limit,
        # not assembled to uvicorn's 16 MiB first; and never compressed: a few kilobytes of
        # deflate would inflate to the limit in every connection, before any of them has
        # authenticated (docs/graphql.md).
        ws="websockets-sansio",
        ws_max_size=MAX_MESSAGE_BYTES,
        ws_per_message_deflate=False,
    )


def _exit_normally(signum: int, frame: object) -> None:
    raise SystemExit(0)


_DEFAULT_WORKER_LIMITS = WorkerLimits()


@cli.command()
@fail_cleanly
def worker(
    tenants_at_once: Annotated[
        int, typer.Option(min=1, max=256, help="Tenants visited at once.")
    ] = _DEFAULT_WORKER_LIMITS.tenants_at_once,
    deliveries_per_step: Annotated[
        int,
        typer.Option(min=1, max=1000, help="Deliveries leased, and sent at once, per tenant."),
    ] = _DEFAULT_WORKER_LIMITS.deliveries_per_step,
) -> None:
    """Deliver webhooks, and purge events older than 30 days, until SIGTERM or Ctrl-C. Run one
    or more, on any hosts: they share the work through the database."""
    # Here, not at the top: the worker's metrics import prometheus_client, which ``serve``
    # imports only once it has chosen where its metrics live.
    from dealbase.worker.main import run_worker

    settings = command_settings()
    limits = WorkerLimits(tenants_at_once=tenants_at_once, deliveries_per_step=deliveries_per_step)
    run_worker(settings, database_url_of(settings), limits)
