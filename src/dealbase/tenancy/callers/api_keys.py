"""API keys: issued, listed, rotated, reset and revoked by operators; checked on every request.

A key reads ``dbk_<key id, 32 hex>_<secret>``. Only a SHA-256 of the secret is stored: the secret
has 256 random bits, so a slow password hash would add latency to every request and no safety.
Changing a key (its rate, its secret, its revocation) notifies every server process
(``NOTIFY``) in the same transaction, so their caches drop the key the moment the change
commits. Every change also writes an audit row (``api_key_audit``) in that transaction: who did
what to which key, when.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, RowMapping, func, insert, select, update

from dealbase.db.statements import dataclass_of_row
from dealbase.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    TenantSuspended,
    Unauthenticated,
)
from dealbase.ids import new_id
from dealbase.tenancy.control_tables import api_key_audit, api_keys, tenants
from dealbase.tenancy.scope import Rate, Scope

KEY_CHANGES_CHANNEL = "dealbase_api_keys"
# A notice's payload is a key id, or this prefix and a tenant id for every key of that tenant.
# Servers that read only key ids take anything else as "every key": safe, if less precise.
TENANT_NOTICE_PREFIX = "tenant:"
MAX_GRACE_SECONDS = 7 * 24 * 3600
MAX_KEY_NAME_LENGTH = 200
MAX_RATE = 100_000.0
MAX_BURST = 1_000_000
MAX_KEY_LIFETIME = timedelta(days=5 * 365)
_KEY_SHAPE = re.compile(r"^dbk_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")
# One message for every 401, so a response never tells which part of the credentials was wrong.
AUTHENTICATION_FAILED = (
    "Authentication failed: send an active API key in X-Api-Key"
    " and its department in X-Department-Id."
)
TENANT_IS_SUSPENDED = (
    "This API key's tenant is suspended: its data is kept, but every key of the tenant is"
    " refused until the service's operator resumes it."
)


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


def _format_key(key_id: uuid.UUID, secret: str) -> str:
    return f"dbk_{key_id.hex}_{secret}"


def parse_api_key(value: str | None) -> tuple[uuid.UUID, str] | None:
    if value is None:
        return None
    match = _KEY_SHAPE.fullmatch(value)
    if match is None:
        return None
    return _key_id(match.group(1)), match.group(2)


@lru_cache(maxsize=4096)
def _key_id(hex_digits: str) -> uuid.UUID:
    """The id a key's 32 hex digits write, parsed once for the key's requests (a cached one
    costs a fraction of a UUID's parse)."""
    return uuid.UUID(hex=hex_digits)


class KeyAction(StrEnum):
    """What an audit row records; the values are stored."""

    issue = "issue"
    rotate = "rotate"
    revoke = "revoke"
    reset = "reset"
    rate = "rate"


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """The only moment the secret exists in the clear."""

    key_id: uuid.UUID
    api_key: str
    tenant_id: uuid.UUID
    department_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class KeyInfo:
    key_id: uuid.UUID
    name: str | None
    tenant_id: uuid.UUID
    department_id: uuid.UUID | None
    created_at: datetime
    rotated_at: datetime | None
    revoked_at: datetime | None
    rate: Rate | None
    expires_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One change to a key. ``details`` holds the change's arguments, never a secret."""

    at: datetime
    tenant_id: uuid.UUID
    key_id: uuid.UUID
    action: KeyAction
    actor: str
    details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class KeyCredentials:
    """What authentication needs of a key; this is what server processes cache."""

    key_id: uuid.UUID
    tenant_id: uuid.UUID
    schema: str
    department_id: uuid.UUID | None
    secret_hash: bytes
    previous_secret_hash: bytes | None
    previous_secret_expires_at: datetime | None
    revoked: bool
    rate: Rate | None
    expires_at: datetime | None
    tenant_suspended: bool
    # A department key's Scope and its department as X-Department-Id writes it, made once: a
    # request whose header is that text gets that Scope, without parsing the header into a UUID
    # and building and checking a Scope again.
    department_text: str | None = field(init=False, compare=False)
    department_scope: Scope | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        department_id = self.department_id
        made = (
            (None, None)
            if department_id is None
            else (
                str(department_id),
                Scope(self.tenant_id, self.schema, department_id, self.key_id, self.rate),
            )
        )
        object.__setattr__(self, "department_text", made[0])
        object.__setattr__(self, "department_scope", made[1])

    def accepts(self, secret: str, now: datetime) -> bool:
        """Checked at every use, against ``now``: a cached key expires on time too."""
        digest = _hash(secret)
        current = hmac.compare_digest(digest, self.secret_hash)
        previous = (
            self.previous_secret_hash is not None
            and self.previous_secret_expires_at is not None
            and now < self.previous_secret_expires_at
            and hmac.compare_digest(digest, self.previous_secret_hash)
        )
        expired = self.expires_at is not None and now >= self.expires_at
        return not self.revoked and not expired and (current or previous)


def _rate_of(row: RowMapping) -> Rate | None:
    if row["rate_per_second"] is None:
        return None
    return Rate(row["rate_per_second"], row["rate_burst"])


def _rate_columns(rate: Rate | None) -> dict[str, object]:
    if rate is None:
        return {"rate_per_second": None, "rate_burst": None}
    if not (0 < rate.per_second <= MAX_RATE and 1 <= rate.burst <= MAX_BURST):
        raise Invalid.of(
            "rate",
            "out_of_range",
            f"A rate is above 0 and at most {MAX_RATE}/s, with a burst of 1 to {MAX_BURST}.",
        )
    return {"rate_per_second": rate.per_second, "rate_burst": rate.burst}


def _rate_details(rate: Rate | None) -> dict[str, object]:
    return {
        "rate_per_second": None if rate is None else rate.per_second,
        "rate_burst": None if rate is None else rate.burst,
    }


def _json_timestamp(value: datetime | None) -> str | None:
    """As the CLI prints timestamps: UTC, six fractional digits and ``Z``."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _audit(
    connection: Connection,
    row: RowMapping,
    action: KeyAction,
    actor: str,
    details: Mapping[str, object],
) -> None:
    """Records a change to the key ``row`` in the caller's transaction: both commit, or neither."""
    connection.execute(
        insert(api_key_audit).values(
            tenant_id=row["tenant_id"],
            key_id=row["id"],
            action=action.value,
            actor=actor,
            at=func.now(),
            details=dict(details),
        )
    )


def issue_key(
    connection: Connection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    name: str | None,
    rate: Rate | None = None,
    *,
    expires_in: timedelta | None = None,
    actor: str,
) -> IssuedKey:
    """Stores a new key; the caller has checked that the department exists in the tenant.

    With ``expires_in``, the key is refused from ``now() + expires_in`` on.
    """
    _check_name_and_lifetime(name, expires_in)
    key_id, secret = new_id(), _new_secret()
    row = (
        connection.execute(
            insert(api_keys)
            .values(
                id=key_id,
                tenant_id=tenant_id,
                department_id=department_id,
                name=name,
                secret_hash=_hash(secret),
                created_at=func.now(),
                expires_at=None if expires_in is None else func.now() + expires_in,
                **_rate_columns(rate),
            )
            .returning(api_keys.c.id, api_keys.c.tenant_id, api_keys.c.expires_at)
        )
        .mappings()
        .one()
    )
    _audit(
        connection,
        row,
        KeyAction.issue,
        actor,
        {
            "name": name,
            "department_id": None if department_id is None else str(department_id),
            "expires_at": _json_timestamp(row["expires_at"]),
            **_rate_details(rate),
        },
    )
    return IssuedKey(key_id, _format_key(key_id, secret), tenant_id, department_id)


def _check_name_and_lifetime(name: str | None, expires_in: timedelta | None) -> None:
    if name is not None and (len(name) > MAX_KEY_NAME_LENGTH or "\x00" in name):
        raise Invalid.of(
            "name", "too_long", f"A key name has at most {MAX_KEY_NAME_LENGTH} characters."
        )
    if expires_in is not None and not timedelta(0) < expires_in <= MAX_KEY_LIFETIME:
        raise Invalid.of(
            "expires_in",
            "out_of_range",
            f"A key expires after more than 0 seconds and at most {MAX_KEY_LIFETIME.days} days.",
        )


def _info(row: RowMapping) -> KeyInfo:
    return dataclass_of_row(KeyInfo, row, key_id=row["id"], rate=_rate_of(row))


def list_keys(connection: Connection, tenant_id: uuid.UUID) -> list[KeyInfo]:
    rows = connection.execute(
        select(api_keys).where(api_keys.c.tenant_id == tenant_id).order_by(api_keys.c.created_at)
    ).mappings()
    return [_info(row) for row in rows]


def _announce_change(connection: Connection, key_id: uuid.UUID) -> None:
    # Delivered by PostgreSQL on commit, and only then: a rolled-back change invalidates nothing.
    connection.execute(select(func.pg_notify(KEY_CHANGES_CHANNEL, str(key_id))))


def announce_tenant_change(connection: Connection, tenant_id: uuid.UUID) -> None:
    """Every server process drops every key of the tenant from its cache when the caller's
    transaction commits (a suspension, a resumption, a deletion)."""
    connection.execute(
        select(func.pg_notify(KEY_CHANGES_CHANNEL, f"{TENANT_NOTICE_PREFIX}{tenant_id}"))
    )


def list_audit(connection: Connection, tenant_id: uuid.UUID) -> list[AuditRecord]:
    """The tenant's key changes, oldest first."""
    rows = connection.execute(
        select(api_key_audit)
        .where(api_key_audit.c.tenant_id == tenant_id)
        .order_by(api_key_audit.c.at, api_key_audit.c.id)
    ).mappings()
    return [dataclass_of_row(AuditRecord, row, action=KeyAction(row["action"])) for row in rows]


def _change_key(
    connection: Connection,
    key_id: uuid.UUID,
    values: dict[str, object],
    action: KeyAction,
    actor: str,
    details: Mapping[str, object],
) -> KeyInfo:
    """Changes the key, audits it and tells every server process, whose caches then drop it."""
    row = (
        connection.execute(
            update(api_keys).where(api_keys.c.id == key_id).values(**values).returning(*api_keys.c)
        )
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound(f"No API key has the id {key_id}.")
    _audit(connection, row, action, actor, details)
    _announce_change(connection, key_id)
    return _info(row)


def set_key_rate(
    connection: Connection, key_id: uuid.UUID, rate: Rate | None, *, actor: str
) -> KeyInfo:
    """The key's own rate limit (None: back to the default), in force on every server at once."""
    return _change_key(
        connection, key_id, _rate_columns(rate), KeyAction.rate, actor, _rate_details(rate)
    )


def revoke_tenant_keys(
    connection: Connection, tenant_id: uuid.UUID, *, actor: str, details: Mapping[str, object]
) -> int:
    """Revokes every key of the tenant not yet revoked, each with its audit row, in the caller's
    transaction; returns how many. The caller announces the tenant's change."""
    revoked = (
        connection.execute(
            update(api_keys)
            .where(api_keys.c.tenant_id == tenant_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=func.now())
            .returning(api_keys.c.id, api_keys.c.tenant_id)
        )
        .mappings()
        .all()
    )
    for row in revoked:
        _audit(connection, row, KeyAction.revoke, actor, details)
    return len(revoked)


def revoke_key(connection: Connection, key_id: uuid.UUID, *, actor: str) -> KeyInfo:
    return _change_key(
        connection,
        key_id,
        {"revoked_at": func.coalesce(api_keys.c.revoked_at, func.now())},
        KeyAction.revoke,
        actor,
        {},
    )


def rotate_key(
    connection: Connection, key_id: uuid.UUID, grace_seconds: int, *, actor: str
) -> IssuedKey:
    """A new secret for the same key; the old one is accepted for ``grace_seconds`` more."""
    if not 0 <= grace_seconds <= MAX_GRACE_SECONDS:
        raise Invalid.of(
            "grace_seconds",
            "out_of_range",
            f"The grace period is 0 to {MAX_GRACE_SECONDS} seconds.",
        )
    return _replace_secret(
        connection, key_id, grace_seconds, KeyAction.rotate, actor, {"grace_seconds": grace_seconds}
    )


def reset_key(connection: Connection, key_id: uuid.UUID, *, actor: str) -> IssuedKey:
    """For a compromised secret: a new one, and the old one -- with any previous secret still
    in a rotation's grace period -- refused at once."""
    return _replace_secret(connection, key_id, 0, KeyAction.reset, actor, {})


def _replace_secret(
    connection: Connection,
    key_id: uuid.UUID,
    grace_seconds: int,
    action: KeyAction,
    actor: str,
    details: Mapping[str, object],
) -> IssuedKey:
    current = (
        connection.execute(select(api_keys).where(api_keys.c.id == key_id).with_for_update())
        .mappings()
        .first()
    )
    if current is None:
        raise NotFound(f"No API key has the id {key_id}.")
    if current["revoked_at"] is not None:
        raise Conflict(f"The API key {key_id} is revoked; issue a new one.")
    secret = _new_secret()
    # Without a grace period, the previous secret goes too, even one still in an earlier
    # rotation's grace period.
    connection.execute(
        update(api_keys)
        .where(api_keys.c.id == key_id)
        .values(
            secret_hash=_hash(secret),
            previous_secret_hash=current["secret_hash"] if grace_seconds else None,
            previous_secret_expires_at=(
                func.now() + timedelta(seconds=grace_seconds) if grace_seconds else None
            ),
            rotated_at=func.now(),
        )
    )
    _audit(connection, current, action, actor, details)
    _announce_change(connection, key_id)
    return IssuedKey(
        key_id, _format_key(key_id, secret), current["tenant_id"], current["department_id"]
    )


def load_credentials(connection: Connection, key_id: uuid.UUID) -> KeyCredentials | None:
    row = connection.execute(
        select(
            api_keys.c.id,
            api_keys.c.tenant_id,
            tenants.c.schema_name,
            api_keys.c.department_id,
            api_keys.c.secret_hash,
            api_keys.c.previous_secret_hash,
            api_keys.c.previous_secret_expires_at,
            api_keys.c.revoked_at,
            api_keys.c.rate_per_second,
            api_keys.c.rate_burst,
            api_keys.c.expires_at,
            tenants.c.suspended_at,
        )
        .join(tenants, tenants.c.id == api_keys.c.tenant_id)
        .where(api_keys.c.id == key_id)
    ).first()
    if row is None:
        return None
    return KeyCredentials(
        key_id=row.id,
        tenant_id=row.tenant_id,
        schema=row.schema_name,
        department_id=row.department_id,
        secret_hash=bytes(row.secret_hash),
        previous_secret_hash=None
        if row.previous_secret_hash is None
        else bytes(row.previous_secret_hash),
        previous_secret_expires_at=row.previous_secret_expires_at,
        revoked=row.revoked_at is not None,
        rate=_rate_of(row._mapping),
        expires_at=row.expires_at,
        tenant_suspended=row.suspended_at is not None,
    )


def scope_for_request(
    credentials: KeyCredentials | None,
    secret: str,
    department_header: str | None,
    *,
    tenant_wide_allowed: bool = False,
    now: datetime | None = None,
) -> Scope:
    """The Scope of a request, or the error its credentials deserve.

    A department key needs its department in X-Department-Id. A tenant-wide key (no department)
    is accepted only where ``tenant_wide_allowed`` (the dashboards' GraphQL API) and needs no
    X-Department-Id there; its Scope spans every department of its tenant.

    A suspended tenant is told only to a caller whose key is good: a bad key gets its 401.
    The key's expiry and a rotation's grace period are judged at ``now`` (by default the
    present moment).
    """
    if credentials is None or not credentials.accepts(
        secret, datetime.now(UTC) if now is None else now
    ):
        raise Unauthenticated(AUTHENTICATION_FAILED)
    if credentials.tenant_suspended:
        raise TenantSuspended(TENANT_IS_SUSPENDED)
    if credentials.department_id is None:
        if not tenant_wide_allowed:
            raise Forbidden(
                "A tenant-wide key serves the dashboards' GraphQL API; integrations use a"
                " department key."
            )
        return Scope(
            credentials.tenant_id, credentials.schema, None, credentials.key_id, credentials.rate
        )
    return _department_scope(credentials, department_header)


def _department_scope(credentials: KeyCredentials, department_header: str | None) -> Scope:
    """A department key's Scope, for a request whose X-Department-Id names its department."""
    if department_header is None:
        raise Unauthenticated(AUTHENTICATION_FAILED)
    if (
        department_header == credentials.department_text
        and credentials.department_scope is not None
    ):
        return credentials.department_scope
    try:
        department_id = uuid.UUID(department_header.strip())
    except ValueError:
        department_id = None
    if credentials.department_id is None or department_id != credentials.department_id:
        raise Forbidden("This API key does not give access to the department in X-Department-Id.")
    return Scope(
        tenant_id=credentials.tenant_id,
        schema=credentials.schema,
        department_id=credentials.department_id,
        key_id=credentials.key_id,
        key_rate=credentials.rate,
    )
