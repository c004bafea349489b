"""What every command of ``dealbase`` shares: the root command and its groups, the options
several commands take, one-line failures, the settings and the database, and the output (one
JSON value on stdout with ``--json``)."""

from __future__ import annotations

import dataclasses
import functools
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Annotated, Any, ParamSpec, TypeVar

import orjson
import psycopg
import typer
from sqlalchemy.exc import DBAPIError
from typer.core import TyperGroup

from dealbase.config import Settings, SettingsError, load_settings
from dealbase.db.database import Database, DatabaseLimits
from dealbase.db.faults import is_transient
from dealbase.errors import DomainError, Invalid
from dealbase.ops.embedded_postgres import database_url_of
from dealbase.ops.observability import configure_logging
from dealbase.platform.resources import format_timestamp


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


def _help_when_bare(context: typer.Context) -> None:
    """A group named without a command answers with its help (exit 0)."""
    if context.invoked_subcommand is None:
        typer.echo(context.get_help())
        raise typer.Exit(0)


cli = typer.Typer(cls=_OneLineErrors, pretty_exceptions_enable=False, add_completion=False)
cli.callback(
    invoke_without_command=True,
    help="Operate dealbase: migrations, tenants and their departments, employees and keys, the"
    " server and the webhook worker.",
)(_help_when_bare)


def command_group(help_text: str) -> typer.Typer:
    """A group of commands, which ``dealbase``'s package adds to ``cli`` in the order of its
    help."""
    group = typer.Typer(help=help_text)
    group.callback(invoke_without_command=True)(_help_when_bare)
    return group


JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON value on stdout.")]
TenantOption = Annotated[uuid.UUID, typer.Option("--tenant", help="Tenant id.")]
TenantArgument = Annotated[uuid.UUID, typer.Argument(metavar="TENANT_ID", help="Tenant id.")]

P = ParamSpec("P")
R = TypeVar("R")


class CliFailure(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def fail_cleanly(command: Callable[P, R]) -> Callable[P, R]:
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
            _database_failure(exc)
            raise typer.Exit(1) from None

    return run


def _database_failure(exc: DBAPIError | psycopg.Error) -> None:
    # Units of work raise psycopg's errors; the control schema, SQLAlchemy's wrapping them.
    error = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    first_line = str(error).strip().splitlines()[0]
    if is_transient(error):
        typer.echo(f"error: cannot reach PostgreSQL: {first_line}", err=True)
    elif isinstance(error, psycopg.errors.UndefinedTable):
        typer.echo("error: the database is not migrated; run `dealbase migrate`", err=True)
    else:
        typer.echo(f"error: database error: {first_line}", err=True)


def command_settings() -> Settings:
    settings = load_settings()
    configure_logging(settings.log_format, settings.log_level)
    return settings


# An operator's command may build an index on a large table or wait its turn for a lock: the
# request limits are not its own.
_OPERATOR_LIMITS = DatabaseLimits(
    statement_timeout_ms=0, lock_timeout_ms=0, acquire_timeout_seconds=30
)


def command_database(settings: Settings | None = None) -> Database:
    settings = settings or command_settings()
    return Database.from_settings(
        settings,
        database_url_of(settings),
        pool_size=2,
        max_overflow=settings.migrate_concurrency,
        limits=_OPERATOR_LIMITS,
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


def emit(as_json: bool, value: Any, human: str) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(_plain(value)).decode() + "\n")
    else:
        typer.echo(human)


def pick(value: Any, *names: str) -> dict[str, Any]:
    plain = _plain(value)
    return {name: plain[name] for name in names}
