"""``dealbase key``: issue, list, update, revoke, rotate and reset API keys; their audit."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated

import orjson
import typer

from dealbase.config import parse_rate
from dealbase.ops import admin
from dealbase.ops.cli.common import (
    CliFailure,
    JsonFlag,
    TenantOption,
    command_database,
    command_group,
    emit,
    fail_cleanly,
)
from dealbase.platform.resources import format_timestamp
from dealbase.tenancy.callers.api_keys import MAX_KEY_LIFETIME, AuditRecord, IssuedKey, KeyInfo
from dealbase.tenancy.scope import Rate

key_cli = command_group("Issue, list, rotate, reset and revoke API keys; their audit.")

RateOption = Annotated[
    str | None, typer.Option("--rate", help="The key's own rate limit, as N/s (with --burst).")
]
BurstOption = Annotated[
    int | None, typer.Option("--burst", min=1, help="Requests the key may send at once.")
]


class KeyScope(StrEnum):
    department = "department"
    tenant = "tenant"


@key_cli.command("issue")
@fail_cleanly
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
        command_database(), tenant, department, name, _key_rate(rate, burst), lifetime
    )
    emit(as_json, issued, f"key {issued.key_id}\napi key (shown once): {issued.api_key}")


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
@fail_cleanly
def key_list(tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """The tenant's keys, without secrets: state, last use (to the minute) and expiry."""
    keys = admin.list_keys(command_database(), tenant)
    now = datetime.now(UTC)
    human = "\n".join(
        f"{k.key_id}  {_state(k, now):7}  last used {_when(k.last_used_at, 'never')}"
        f"  expires {_when(k.expires_at, 'never')}  {k.name or ''}".rstrip()
        for k in keys
    )
    emit(as_json, keys, human)


def _state(key: KeyInfo, now: datetime) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


def _when(value: datetime | None, otherwise: str) -> str:
    return otherwise if value is None else format_timestamp(value)


@key_cli.command("update")
@fail_cleanly
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
    info = admin.set_key_rate(
        command_database(), key_id, None if default_rate else _key_rate(rate, burst)
    )
    emit(as_json, info, f"key {info.key_id} rate: {_describe(info.rate)}")


def _key_rate(rate: str | None, burst: int | None) -> Rate | None:
    if rate is None and burst is None:
        return None
    if rate is None or burst is None:
        raise CliFailure("--rate and --burst go together", exit_code=2)
    try:
        return Rate(parse_rate(rate), burst)
    except ValueError as exc:
        raise CliFailure(f"--rate {exc}", exit_code=2) from None


def _emit_new_secret(as_json: bool, issued: IssuedKey) -> None:
    emit(as_json, issued, f"key {issued.key_id}\nnew api key (shown once): {issued.api_key}")


def _describe(rate: Rate | None) -> str:
    return "default" if rate is None else f"{rate.per_second:g}/s, burst {rate.burst}"


@key_cli.command("revoke")
@fail_cleanly
def key_revoke(key_id: uuid.UUID, as_json: JsonFlag = False) -> None:
    """Refuse the key from now on, on every server process."""
    info = admin.revoke_key(command_database(), key_id)
    emit(as_json, info, f"key {info.key_id} revoked")


@key_cli.command("rotate")
@fail_cleanly
def key_rotate(
    key_id: uuid.UUID,
    grace_seconds: Annotated[
        int, typer.Option(min=0, help="How long the old secret keeps working.")
    ] = 0,
    as_json: JsonFlag = False,
) -> None:
    """A new secret for the key; the old one works for --grace-seconds more, then never again."""
    issued = admin.rotate_key(command_database(), key_id, grace_seconds)
    _emit_new_secret(as_json, issued)


@key_cli.command("reset")
@fail_cleanly
def key_reset(key_id: uuid.UUID, as_json: JsonFlag = False) -> None:
    """For a compromised secret: a new one, and every older secret refused at once."""
    issued = admin.reset_key(command_database(), key_id)
    _emit_new_secret(as_json, issued)


@key_cli.command("audit")
@fail_cleanly
def key_audit(tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """Every change to the tenant's keys, oldest first: when, what, which key, who."""
    records = admin.key_audit(command_database(), tenant)
    emit(as_json, records, "\n".join(_audit_line(record) for record in records))


def _audit_line(record: AuditRecord) -> str:
    details = " ".join(
        f"{name}={orjson.dumps(value).decode()}" for name, value in sorted(record.details.items())
    )
    return (
        f"{format_timestamp(record.at)}  {record.action:6}  {record.key_id}  {record.actor}"
        f"  {details}".rstrip()
    )
