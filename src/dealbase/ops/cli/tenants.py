"""``dealbase tenant``: create, list, suspend, resume, delete, move, rebalance and export."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, cast, get_args

import typer

from dealbase.ops import admin
from dealbase.ops.cli.common import (
    CliFailure,
    JsonFlag,
    TenantArgument,
    command_database,
    command_group,
    command_settings,
    emit,
    fail_cleanly,
    pick,
)
from dealbase.ops.embedded_postgres import database_url_of
from dealbase.ops.export import ExportFormat, ExportRefused, export_jsonl, export_pg_dump
from dealbase.tenancy.registry.placement import Node, TransferMode, move_tenant, rebalance
from dealbase.tenancy.registry.tenants import Tenant, create_tenant, list_tenants

tenant_cli = command_group("Create, list, suspend, resume, delete and export tenants.")


@tenant_cli.command("create")
@fail_cleanly
def tenant_create(name: str, as_json: JsonFlag = False) -> None:
    """Register a tenant and create its schema at the current migration head."""
    settings = command_settings()
    tenant = create_tenant(
        command_database(settings), name, distributed=settings.citus_schema_sharding
    )
    emit(as_json, pick(tenant, "id", "name", "schema"), f"tenant {tenant.id} ({tenant.schema})")


_TENANT_FIELDS = ("id", "name", "schema", "created_at", "suspended_at")


@tenant_cli.command("list")
@fail_cleanly
def tenant_list(as_json: JsonFlag = False) -> None:
    """The tenants (not the deleted ones), each active or suspended."""
    with command_database().control() as connection:
        tenants = list_tenants(connection)
    rows = [pick(t, *_TENANT_FIELDS) for t in tenants]
    emit(
        as_json,
        rows,
        "\n".join(f"{t.id}  {t.schema}  {_tenant_state(t):9}  {t.name}" for t in tenants),
    )


def _tenant_state(tenant: Tenant) -> str:
    return "active" if tenant.suspended_at is None else "suspended"


@tenant_cli.command("suspend")
@fail_cleanly
def tenant_suspend(
    tenant_id: TenantArgument,
    reason: Annotated[
        str | None, typer.Option(help="Why, kept in the tenant's audit record.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Refuse every key of the tenant (403 tenant_suspended) on every server process at once.

    Its data, keys and webhook deliveries already recorded stay; `tenant resume` undoes it.
    """
    tenant = admin.suspend_tenant(command_database(), tenant_id, reason)
    emit(as_json, pick(tenant, *_TENANT_FIELDS), f"tenant {tenant.id} suspended")


@tenant_cli.command("resume")
@fail_cleanly
def tenant_resume(tenant_id: TenantArgument, as_json: JsonFlag = False) -> None:
    """Accept the keys of a suspended tenant again, on every server process at once."""
    tenant = admin.resume_tenant(command_database(), tenant_id)
    emit(as_json, pick(tenant, *_TENANT_FIELDS), f"tenant {tenant.id} resumed")


@tenant_cli.command("delete")
@fail_cleanly
def tenant_delete(
    tenant_id: TenantArgument,
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask for the tenant's name: delete at once.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete the tenant for good: its schema with all its data, its role and its webhook
    wakeups; its keys are revoked. Asks for the tenant's name unless --yes.

    Export it first if the data may be wanted again (`tenant export`).
    """
    settings = command_settings()
    database = command_database(settings)
    if not yes:
        _confirm_deletion(admin.tenant(database, tenant_id))
    deleted = admin.delete_tenant(database, tenant_id, distributed=settings.citus_schema_sharding)
    tenant = deleted.tenant
    value = {
        **pick(tenant, "id", "name", "schema"),
        "keys_revoked": deleted.keys_revoked,
        "wakeups_deleted": deleted.wakeups_deleted,
    }
    emit(
        as_json,
        value,
        f"tenant {tenant.id} ({tenant.schema}) deleted; keys revoked: {deleted.keys_revoked}",
    )


def _confirm_deletion(tenant: Tenant) -> None:
    """Asks for the tenant's name, as GitHub does before deleting a repository: a wrong id
    pasted, or the wrong terminal, is caught before anything is lost."""
    if not sys.stdin.isatty():
        raise CliFailure(
            f"deleting tenant {tenant.id} asks for its name on a terminal; without one, pass --yes"
        )
    typer.echo(
        f"This deletes tenant {tenant.name!r} ({tenant.id}) for good: its schema {tenant.schema}"
        " with all its data, its role and its webhook wakeups, and revokes its API keys.",
        err=True,
    )
    # Not typer.prompt: it prints part of its prompt on stdout, which --json keeps for JSON.
    typer.echo("Type the tenant's name to confirm: ", err=True, nl=False)
    if sys.stdin.readline().strip() != tenant.name:
        raise CliFailure("that is not the tenant's name; nothing was deleted")


TransferModeOption = Annotated[
    str,
    typer.Option(
        "--mode",
        help="Citus's shard_transfer_mode: auto (writes go on while the tables are copied),"
        " force_logical or block_writes (faster; each tenant's writes wait while it moves).",
    ),
]


def _transfer_mode(mode: str) -> TransferMode:
    if mode not in get_args(TransferMode):
        raise CliFailure(f"--mode is one of {', '.join(get_args(TransferMode))}", exit_code=2)
    return cast(TransferMode, mode)


@tenant_cli.command("move")
@fail_cleanly
def tenant_move(
    tenant_id: TenantArgument,
    node: Annotated[
        str,
        typer.Option("--node", help="The worker to move to, HOST:PORT as citus_shards names it."),
    ],
    mode: TransferModeOption = "auto",
    as_json: JsonFlag = False,
) -> None:
    """Move a tenant's distributed schema to another worker of a Citus cluster, while it works."""
    settings = command_settings()
    if not settings.citus_schema_sharding:
        raise CliFailure("tenant move is for a Citus cluster (DEALBASE_CITUS_SCHEMA_SHARDING=true)")
    transfer_mode = _transfer_mode(mode)
    target = Node.parse(node)
    database = command_database(settings)
    tenant = admin.tenant(database, tenant_id)
    started = time.monotonic()
    source = move_tenant(database.url, tenant.schema, target, transfer_mode)
    value = {
        **pick(tenant, "id", "schema"),
        "from": None if source is None else str(source),
        "to": str(target),
        "seconds": round(time.monotonic() - started, 3),
    }
    emit(
        as_json,
        value,
        f"tenant {tenant.id} is on {target} already"
        if source is None
        else f"tenant {tenant.id} moved from {source} to {target} in {value['seconds']} s",
    )


@tenant_cli.command("rebalance")
@fail_cleanly
def tenant_rebalance(mode: TransferModeOption = "auto", as_json: JsonFlag = False) -> None:
    """Spread the tenants evenly over the workers of a Citus cluster (citus_rebalance_start),
    and wait until it is done; tenants keep working meanwhile."""
    settings = command_settings()
    if not settings.citus_schema_sharding:
        raise CliFailure(
            "tenant rebalance is for a Citus cluster (DEALBASE_CITUS_SCHEMA_SHARDING=true)"
        )
    moves = rebalance(database_url_of(settings), _transfer_mode(mode))
    emit(as_json, {"moves": moves}, f"rebalanced: {moves} moves")


@tenant_cli.command("export")
@fail_cleanly
def tenant_export(
    tenant_id: TenantArgument,
    output: Annotated[
        Path, typer.Option("--output", help="A directory that does not exist yet, or is empty.")
    ],
    export_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="jsonl: a file per table and manifest.json; pg-dump: pg_dump's custom format.",
        ),
    ] = ExportFormat.jsonl,
    as_json: JsonFlag = False,
) -> None:
    """Write the tenant's data into --output. It holds the webhook endpoints' signing secrets:
    keep it as safe as the database."""
    settings = command_settings()
    database = command_database(settings)
    tenant = admin.tenant(database, tenant_id)
    try:
        if export_format is ExportFormat.jsonl:
            manifest = export_jsonl(database, tenant, output)
            rows = sum(file.rows for file in manifest.files)
            emit(
                as_json,
                manifest,
                f"tenant {tenant.id}: {rows} rows of {len(manifest.files)} tables in {output}",
            )
        else:
            dump = export_pg_dump(database_url_of(settings), tenant, output)
            value = {"tenant_id": tenant.id, "format": export_format.value, "file": str(dump)}
            emit(as_json, value, f"tenant {tenant.id}: {dump}")
    except ExportRefused as exc:
        raise CliFailure(str(exc)) from None
