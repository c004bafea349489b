"""The ``dealbase`` command; with ``--json`` a command prints exactly one JSON value on stdout."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import re
import shutil
import signal
import ssl
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar, cast, get_args

import orjson
import psycopg
import typer
from sqlalchemy.exc import DBAPIError
from typer.core import TyperGroup

from dealbase.config import Settings, SettingsError, load_settings, parse_rate
from dealbase.db.database import Database, DatabaseLimits
from dealbase.db.faults import is_transient
from dealbase.errors import DomainError, Invalid
from dealbase.migrations.runner import (
    TenantMigration,
    schemas_behind,
    upgrade_control,
    upgrade_tenants,
)
from dealbase.ops import admin, serving
from dealbase.ops.embedded_postgres import embedded_database_url
from dealbase.ops.export import ExportFormat, ExportRefused, export_jsonl, export_pg_dump
from dealbase.ops.metrics_files import prepare_metrics_dir
from dealbase.ops.observability import configure_logging
from dealbase.platform.resources import format_timestamp
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.tenancy.callers.api_keys import MAX_KEY_LIFETIME, AuditRecord, KeyInfo
from dealbase.tenancy.registry.placement import Node, TransferMode, move_tenant, rebalance
from dealbase.tenancy.registry.tenants import Tenant, create_tenant, list_tenants
from dealbase.tenancy.roles import inheriting_login_role
from dealbase.tenancy.scope import Rate
from dealbase.worker.limits import WorkerLimits


class _OneLineErrors(TyperGroup):
    """Usage errors as one ``error: ...`` line on stderr (exit 2), not click's usage banner."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        def run() -> Any:
            return super(_OneLineErrors, self).main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )

        if not standalone_mode:
            return run()
        try:
            result = run()
        except typer.TyperException as exc:
            typer.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


cli = typer.Typer(cls=_OneLineErrors, pretty_exceptions_enable=False, add_completion=False)
tenant_cli = typer.Typer(help="Create, list, suspend, resume, delete and export tenants.")
department_cli = typer.Typer(help="Create departments.")
employee_cli = typer.Typer(help="Create employees.")
key_cli = typer.Typer(help="Issue, list, rotate, reset and revoke API keys; their audit.")


def _help_when_bare(context: typer.Context) -> None:
    """A group named without a command answers with its help (exit 0)."""
    if context.invoked_subcommand is None:
        typer.echo(context.get_help())
        raise typer.Exit(0)


for group in (cli, tenant_cli, department_cli, employee_cli, key_cli):
    group.callback(invoke_without_command=True)(_help_when_bare)
cli.add_typer(tenant_cli, name="tenant")
cli.add_typer(department_cli, name="department")
cli.add_typer(employee_cli, name="employee")
cli.add_typer(key_cli, name="key")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON value on stdout.")]
TenantOption = Annotated[uuid.UUID, typer.Option("--tenant", help="Tenant id.")]
TenantArgument = Annotated[uuid.UUID, typer.Argument(metavar="TENANT_ID", help="Tenant id.")]
RateOption = Annotated[
    str | None, typer.Option("--rate", help="The key's own rate limit, as N/s (with --burst).")
]
BurstOption = Annotated[
    int | None, typer.Option("--burst", min=1, help="Requests the key may send at once.")
]
DepartmentOption = Annotated[uuid.UUID, typer.Option("--department", help="Department id.")]

P = ParamSpec("P")
R = TypeVar("R")


class CliFailure(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _fail_cleanly(command: Callable[P, R]) -> Callable[P, R]:
    """One line on stderr and exit 1 (2 for bad settings or arguments), never a traceback."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except CliFailure as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except SettingsError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except Invalid as exc:
            detail = "; ".join(f"{e.field}: {e.message}" for e in exc.errors) or exc.detail
            typer.echo(f"error: {detail}", err=True)
            raise typer.Exit(2) from None
        except DomainError as exc:
            typer.echo(f"error: {exc.detail}", err=True)
            raise typer.Exit(1) from None
        except (DBAPIError, psycopg.Error) as exc:
            # Units of work raise psycopg's errors; the control schema, SQLAlchemy's wrapping them.
            error = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
            first_line = str(error).strip().splitlines()[0]
            if is_transient(error):
                typer.echo(f"error: cannot reach PostgreSQL: {first_line}", err=True)
            elif isinstance(error, psycopg.errors.UndefinedTable):
                typer.echo("error: the database is not migrated; run `dealbase migrate`", err=True)
            else:
                typer.echo(f"error: database error: {first_line}", err=True)
            raise typer.Exit(1) from None

    return run


def _settings() -> Settings:
    settings = load_settings()
    configure_logging(settings.log_format, settings.log_level)
    return settings


def _database_url(settings: Settings) -> str:
    return settings.database_url or embedded_database_url(settings.data_dir)


def _database(settings: Settings | None = None) -> Database:
    settings = settings or _settings()
    return Database(
        _database_url(settings),
        pool_size=2,
        max_overflow=settings.migrate_concurrency,
        prepared_statements=settings.db_prepared_statements and not settings.db_pgbouncer,
        startup_options=not settings.db_pgbouncer,
        distributed_schemas=settings.citus_schema_sharding,
        # An operator's command may build an index on a large table or wait its turn for a
        # lock: the request limits are not its own.
        limits=DatabaseLimits(
            statement_timeout_ms=0, lock_timeout_ms=0, acquire_timeout_seconds=30
        ),
    )


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, date | uuid.UUID):
        return str(value)
    return value


def _emit(as_json: bool, value: Any, human: str) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(_plain(value)).decode() + "\n")
    else:
        typer.echo(human)


def _pick(value: Any, *names: str) -> dict[str, Any]:
    plain = _plain(value)
    return {name: plain[name] for name in names}


@cli.command()
@_fail_cleanly
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
    settings = _settings()
    database = _database(settings)
    with database.control() as connection:
        upgrade_control(connection, distributed=settings.citus_schema_sharding)
    with database.control() as connection:
        live = [tenant.schema for tenant in list_tenants(connection)]
        schemas = live if every_tenant else schemas_behind(connection)
    tenant_count = len(live)
    results = _upgrade_with_progress(
        database,
        schemas,
        concurrency or settings.migrate_concurrency,
        distributed=settings.citus_schema_sharding,
        show=not as_json,
    )
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
    _emit(
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
    with database.control() as connection:
        inheriting = inheriting_login_role(connection)
    if inheriting:
        typer.echo(
            f"warning: the login role {inheriting} inherits the privileges of every tenant role;"
            f" make it NOINHERIT (ALTER ROLE {inheriting} NOINHERIT), docs/security.md",
            err=True,
        )
    if failed:
        raise typer.Exit(1)


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


@tenant_cli.command("create")
@_fail_cleanly
def tenant_create(name: str, as_json: JsonFlag = False) -> None:
    """Register a tenant and create its schema at the current migration head."""
    settings = _settings()
    tenant = create_tenant(_database(settings), name, distributed=settings.citus_schema_sharding)
    _emit(as_json, _pick(tenant, "id", "name", "schema"), f"tenant {tenant.id} ({tenant.schema})")


_TENANT_FIELDS = ("id", "name", "schema", "created_at", "suspended_at")


@tenant_cli.command("list")
@_fail_cleanly
def tenant_list(as_json: JsonFlag = False) -> None:
    """The tenants (not the deleted ones), each active or suspended."""
    with _database().control() as connection:
        tenants = list_tenants(connection)
    rows = [_pick(t, *_TENANT_FIELDS) for t in tenants]
    _emit(
        as_json,
        rows,
        "\n".join(f"{t.id}  {t.schema}  {_tenant_state(t):9}  {t.name}" for t in tenants),
    )


def _tenant_state(tenant: Tenant) -> str:
    return "active" if tenant.suspended_at is None else "suspended"


@tenant_cli.command("suspend")
@_fail_cleanly
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
    tenant = admin.suspend_tenant(_database(), tenant_id, reason)
    _emit(as_json, _pick(tenant, *_TENANT_FIELDS), f"tenant {tenant.id} suspended")


@tenant_cli.command("resume")
@_fail_cleanly
def tenant_resume(tenant_id: TenantArgument, as_json: JsonFlag = False) -> None:
    """Accept the keys of a suspended tenant again, on every server process at once."""
    tenant = admin.resume_tenant(_database(), tenant_id)
    _emit(as_json, _pick(tenant, *_TENANT_FIELDS), f"tenant {tenant.id} resumed")


@tenant_cli.command("delete")
@_fail_cleanly
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
    settings = _settings()
    database = _database(settings)
    if not yes:
        _confirm_deletion(admin.tenant(database, tenant_id))
    deleted = admin.delete_tenant(database, tenant_id, distributed=settings.citus_schema_sharding)
    tenant = deleted.tenant
    value = {
        **_pick(tenant, "id", "name", "schema"),
        "keys_revoked": deleted.keys_revoked,
        "wakeups_deleted": deleted.wakeups_deleted,
    }
    _emit(
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
@_fail_cleanly
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
    settings = _settings()
    if not settings.citus_schema_sharding:
        raise CliFailure("tenant move is for a Citus cluster (DEALBASE_CITUS_SCHEMA_SHARDING=true)")
    transfer_mode = _transfer_mode(mode)
    target = Node.parse(node)
    database = _database(settings)
    tenant = admin.tenant(database, tenant_id)
    started = time.monotonic()
    source = move_tenant(database.url, tenant.schema, target, transfer_mode)
    value = {
        **_pick(tenant, "id", "schema"),
        "from": None if source is None else str(source),
        "to": str(target),
        "seconds": round(time.monotonic() - started, 3),
    }
    _emit(
        as_json,
        value,
        f"tenant {tenant.id} is on {target} already"
        if source is None
        else f"tenant {tenant.id} moved from {source} to {target} in {value['seconds']} s",
    )


@tenant_cli.command("rebalance")
@_fail_cleanly
def tenant_rebalance(mode: TransferModeOption = "auto", as_json: JsonFlag = False) -> None:
    """Spread the tenants evenly over the workers of a Citus cluster (citus_rebalance_start),
    and wait until it is done; tenants keep working meanwhile."""
    settings = _settings()
    if not settings.citus_schema_sharding:
        raise CliFailure(
            "tenant rebalance is for a Citus cluster (DEALBASE_CITUS_SCHEMA_SHARDING=true)"
        )
    moves = rebalance(_database_url(settings), _transfer_mode(mode))
    _emit(as_json, {"moves": moves}, f"rebalanced: {moves} moves")


@tenant_cli.command("export")
@_fail_cleanly
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
    settings = _settings()
    database = _database(settings)
    tenant = admin.tenant(database, tenant_id)
    try:
        if export_format is ExportFormat.jsonl:
            manifest = export_jsonl(database, tenant, output)
            rows = sum(file.rows for file in manifest.files)
            _emit(
                as_json,
                manifest,
                f"tenant {tenant.id}: {rows} rows of {len(manifest.files)} tables in {output}",
            )
        else:
            dump = export_pg_dump(_database_url(settings), tenant, output)
            value = {"tenant_id": tenant.id, "format": export_format.value, "file": str(dump)}
            _emit(as_json, value, f"tenant {tenant.id}: {dump}")
    except ExportRefused as exc:
        raise CliFailure(str(exc)) from None


@department_cli.command("create")
@_fail_cleanly
def department_create(name: str, tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """Create a department with the default pipeline; new deals start at its first step."""
    department = admin.create_department(_database(), tenant, name)
    value = {
        "id": department.id,
        "name": department.name,
        "steps": [_pick(step, "id", "name", "position") for step in department.steps],
    }
    _emit(as_json, value, f"department {department.id} with {len(department.steps)} steps")


@employee_cli.command("create")
@_fail_cleanly
def employee_create(
    name: str,
    tenant: TenantOption,
    department: DepartmentOption,
    email: Annotated[str | None, typer.Option(help="Email address.")] = None,
    as_json: JsonFlag = False,
) -> None:
    employee = admin.create_employee(_database(), tenant, department, name, email)
    _emit(
        as_json, _pick(employee, "id", "name", "email", "department_id"), f"employee {employee.id}"
    )


class KeyScope(StrEnum):
    department = "department"
    tenant = "tenant"


@key_cli.command("issue")
@_fail_cleanly
def key_issue(
    tenant: TenantOption,
    department: Annotated[
        uuid.UUID | None, typer.Option("--department", help="Department id (department keys).")
    ] = None,
    scope: Annotated[
        KeyScope,
        typer.Option(help="department: one department's integration key; tenant: a dashboard key."),
    ] = KeyScope.department,
    name: Annotated[str | None, typer.Option(help="What the key is for.")] = None,
    rate: RateOption = None,
    burst: BurstOption = None,
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in",
            help="Refuse the key after this long: a whole number of d, h or m (90d, 12h, 30m).",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Issue a key. The secret is shown this once.

    A department key (the default) needs --department; a tenant-wide dashboard key
    (--scope tenant) reaches every department of the tenant through GraphQL and takes none.
    """
    if (scope is KeyScope.department) == (department is None):
        raise CliFailure(
            "a department key needs --department; a --scope tenant key takes none", exit_code=2
        )
    lifetime = None if expires_in is None else _lifetime(expires_in)
    issued = admin.issue_key(
        _database(), tenant, department, name, _key_rate(rate, burst), lifetime
    )
    _emit(as_json, issued, f"key {issued.key_id}\napi key (shown once): {issued.api_key}")


_LIFETIME_SHAPE = re.compile(r"^([0-9]{1,7})([dhm])$")
_LIFETIME_UNITS = {"d": timedelta(days=1), "h": timedelta(hours=1), "m": timedelta(minutes=1)}


def _lifetime(text: str) -> timedelta:
    match = _LIFETIME_SHAPE.fullmatch(text.strip())
    if match is None:
        raise CliFailure(
            f"--expires-in {text!r}: a whole number followed by d, h or m, as in 90d",
            exit_code=2,
        )
    lifetime = int(match.group(1)) * _LIFETIME_UNITS[match.group(2)]
    if not timedelta(0) < lifetime <= MAX_KEY_LIFETIME:
        raise CliFailure(
            f"--expires-in {text!r}: above 0 and at most {MAX_KEY_LIFETIME.days}d", exit_code=2
        )
    return lifetime


@key_cli.command("list")
@_fail_cleanly
def key_list(tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """The tenant's keys, without secrets: state, last use (to the minute) and expiry."""
    keys = admin.list_keys(_database(), tenant)
    now = datetime.now(UTC)
    human = "\n".join(
        f"{k.key_id}  {_state(k, now):7}  last used {_when(k.last_used_at, 'never')}"
        f"  expires {_when(k.expires_at, 'never')}  {k.name or ''}".rstrip()
        for k in keys
    )
    _emit(as_json, keys, human)


def _state(key: KeyInfo, now: datetime) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


def _when(value: datetime | None, otherwise: str) -> str:
    return otherwise if value is None else format_timestamp(value)


@key_cli.command("update")
@_fail_cleanly
def key_update(
    key_id: uuid.UUID,
    rate: RateOption = None,
    burst: BurstOption = None,
    default_rate: Annotated[
        bool, typer.Option("--default-rate", help="Back to the default rate limit.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Set the key's own rate limit (--rate N/s --burst M), or drop it (--default-rate)."""
    if default_rate == (rate is not None or burst is not None):
        raise CliFailure("give --rate and --burst, or --default-rate", exit_code=2)
    info = admin.set_key_rate(_database(), key_id, None if default_rate else _key_rate(rate, burst))
    _emit(as_json, info, f"key {info.key_id} rate: {_describe(info.rate)}")


def _key_rate(rate: str | None, burst: int | None) -> Rate | None:
    if rate is None and burst is None:
        return None
    if rate is None or burst is None:
        raise CliFailure("--rate and --burst go together", exit_code=2)
    try:
        return Rate(parse_rate(rate), burst)
    except ValueError as exc:
        raise CliFailure(f"--rate {exc}", exit_code=2) from None


def _describe(rate: Rate | None) -> str:
    return "default" if rate is None else f"{rate.per_second:g}/s, burst {rate.burst}"


@key_cli.command("revoke")
@_fail_cleanly
def key_revoke(key_id: uuid.UUID, as_json: JsonFlag = False) -> None:
    """Refuse the key from now on, on every server process."""
    info = admin.revoke_key(_database(), key_id)
    _emit(as_json, info, f"key {info.key_id} revoked")


@key_cli.command("rotate")
@_fail_cleanly
def key_rotate(
    key_id: uuid.UUID,
    grace_seconds: Annotated[
        int, typer.Option(min=0, help="How long the old secret keeps working.")
    ] = 0,
    as_json: JsonFlag = False,
) -> None:
    """A new secret for the key; the old one works for --grace-seconds more, then never again."""
    issued = admin.rotate_key(_database(), key_id, grace_seconds)
    _emit(as_json, issued, f"key {issued.key_id}\nnew api key (shown once): {issued.api_key}")


@key_cli.command("reset")
@_fail_cleanly
def key_reset(key_id: uuid.UUID, as_json: JsonFlag = False) -> None:
    """For a compromised secret: a new one, and every older secret refused at once."""
    issued = admin.reset_key(_database(), key_id)
    _emit(as_json, issued, f"key {issued.key_id}\nnew api key (shown once): {issued.api_key}")


@key_cli.command("audit")
@_fail_cleanly
def key_audit(tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """Every change to the tenant's keys, oldest first: when, what, which key, who."""
    records = admin.key_audit(_database(), tenant)
    _emit(as_json, records, "\n".join(_audit_line(record) for record in records))


def _audit_line(record: AuditRecord) -> str:
    details = " ".join(
        f"{name}={orjson.dumps(value).decode()}" for name, value in sorted(record.details.items())
    )
    return (
        f"{format_timestamp(record.at)}  {record.action:6}  {record.key_id}  {record.actor}"
        f"  {details}".rstrip()
    )


@cli.command()
@_fail_cleanly
def demo(as_json: JsonFlag = False) -> None:
    """Ensure the demo tenant, department, employee and key, and print them with a curl example."""
    settings = _settings()
    database = _database(settings)
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
    _emit(as_json, value, human)


@cli.command("openapi")
@_fail_cleanly
def openapi_document() -> None:
    """Print the OpenAPI document (kept in openapi.json at the repository's root)."""
    from dealbase.app import create_app

    app = create_app(Settings(database_url="postgresql://unused@localhost/unused"))
    sys.stdout.write(orjson.dumps(app.openapi(), option=orjson.OPT_INDENT_2).decode() + "\n")


@cli.command("graphql-schema")
@_fail_cleanly
def graphql_schema() -> None:
    """Print the GraphQL schema as SDL (kept in src/dealbase/graphql_api/schema.graphql)."""
    from dealbase.graphql_api.schema import build_schema

    typer.echo(build_schema(Settings(database_url=None)).as_str())


# Above what a worker's requests in flight hold at once (Settings.gc_young_threshold; measured in
# bench/README.md, "Full collections every second").
SERVER_GC_YOUNG_THRESHOLD = 10_000


@cli.command()
@_fail_cleanly
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind (DEALBASE_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (DEALBASE_PORT).")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Server processes.")] = 1,
) -> None:
    """Serve the API with uvicorn."""
    import uvicorn

    from dealbase.graphql_api.live.protocol import MAX_MESSAGE_BYTES

    settings = _settings()
    # Worker processes build their app from the environment: hand them the resolved database,
    # so only this process owns the embedded server.
    os.environ["DEALBASE_DATABASE_URL"] = _database_url(settings)
    # A worker is one app for its whole life: what it holds once started stays (config.py).
    os.environ.setdefault("DEALBASE_FREEZE_STARTUP_OBJECTS", "true")
    os.environ.setdefault("DEALBASE_GC_YOUNG_THRESHOLD", str(SERVER_GC_YOUNG_THRESHOLD))
    # Before prometheus_client is first imported: it picks its kind of values then.
    metrics_dir = prepare_metrics_dir()
    from dealbase.ops.metrics import multiprocess_registry

    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        registry = multiprocess_registry()
        assert registry is not None, "prepare_metrics_dir set PROMETHEUS_MULTIPROC_DIR"
        start_http_server(settings.metrics_port, addr=host or settings.host, registry=registry)
    # uvicorn handles SIGTERM itself (a graceful shutdown), then raises it again to the handler
    # it found: this one ends the process normally, so that exit handlers run (the embedded
    # PostgreSQL stops) instead of the signal killing it.
    signal.signal(signal.SIGTERM, _exit_normally)
    try:
        serving.run(
            uvicorn.Config(
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
                # A WebSocket message is refused as its frames arrive once past the app's own
                # limit, not assembled to uvicorn's 16 MiB first; and never compressed: a few
                # kilobytes of deflate would inflate to the limit in every connection, before
                # any of them has authenticated (docs/graphql.md).
                ws="websockets-sansio",
                ws_max_size=MAX_MESSAGE_BYTES,
                ws_per_message_deflate=False,
            ),
            settings.write_timeout_seconds,
        )
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


_DEFAULT_WORKER_LIMITS = WorkerLimits()


@cli.command()
@_fail_cleanly
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
    settings = _settings()
    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, addr=settings.host)
    limits = WorkerLimits(tenants_at_once=tenants_at_once, deliveries_per_step=deliveries_per_step)
    asyncio.run(_deliver_until_stopped(settings, limits))


async def _deliver_until_stopped(settings: Settings, limits: WorkerLimits) -> None:
    # Here, not at the top: the worker's metrics import prometheus_client, which ``serve``
    # imports only once it has chosen where its metrics live.
    from dealbase.worker.delivery import DeliveryWorker
    from dealbase.worker.sending import Sender, trusted_authorities
    from dealbase.worker.spares import SpareSchemaKeeper

    database = Database(
        _database_url(settings),
        pool_size=limits.tenants_at_once,
        max_overflow=0,
        prepared_statements=settings.db_prepared_statements and not settings.db_pgbouncer,
        startup_options=not settings.db_pgbouncer,
        distributed_schemas=settings.citus_schema_sharding,
        limits=DatabaseLimits(
            statement_timeout_ms=settings.db_statement_timeout_ms,
            lock_timeout_ms=settings.db_lock_timeout_ms,
            acquire_timeout_seconds=settings.db_acquire_timeout_ms / 1000,
        ),
        tenants_per_connection=settings.tenants_per_connection(),
        tenant_affinity=not settings.db_pgbouncer,
        sessions=not settings.db_pgbouncer,
        pipelines=not settings.db_pgbouncer,
    )
    try:
        trusted = trusted_authorities(settings.webhooks_ca_bundle)
    except ssl.SSLError as unreadable:
        raise CliFailure(
            "The certificate authorities to trust (DEALBASE_WEBHOOKS_CA_BUNDLE, SSL_CERT_FILE,"
            f" SSL_CERT_DIR) hold none OpenSSL can read: {unreadable}",
            exit_code=2,
        ) from None
    sender = Sender(AddressPolicy(allow_private=settings.webhooks_allow_private), trusted)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for stopping in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stopping, stop.set)
    await database.open()
    typer.echo("dealbase worker: delivering webhooks (SIGTERM or Ctrl-C stops)", err=True)
    spares = SpareSchemaKeeper(
        database, settings.spare_tenant_schemas, distributed=settings.citus_schema_sharding
    )
    try:
        await asyncio.gather(
            DeliveryWorker(database, sender, limits=limits).run(stop), spares.run(stop)
        )
    finally:
        await sender.close()
        await database.close()


def _exit_normally(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main() -> None:
    cli()
