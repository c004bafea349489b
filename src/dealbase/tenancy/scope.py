"""The Scope: who is calling, and which tenant schema and department their data lives in."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace

_SCHEMA_NAME = re.compile(r"^t_[0-9a-f]{32}$")
# The schema every tenant table is declared in; each unit of work maps it onto the caller's.
TENANT_SCHEMA_PLACEHOLDER = "tenant"


def checked_schema_name(schema: str) -> str:
    """``schema``, refused unless it is a tenant schema's name: it reaches SQL as an identifier."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"not a tenant schema name: {schema!r}")
    return schema


def tenant_role(schema: str) -> str:
    """The tenant's role: its schema's name, checked to be one (it reaches SQL as an identifier)."""
    return checked_schema_name(schema)


def schema_for_tenant(tenant_id: uuid.UUID) -> str:
    """The tenant's schema name, derived from its id (and nothing a client controls)."""
    return f"t_{tenant_id.hex}"


def tenant_id_for_schema(schema: str) -> uuid.UUID:
    """The id a tenant taking the spare schema ``schema`` gets, so that the two still match."""
    return uuid.UUID(hex=checked_schema_name(schema).removeprefix("t_"))


@dataclass(frozen=True, slots=True)
class Rate:
    """``per_second`` requests a second on average, and up to ``burst`` at once."""

    per_second: float
    burst: int

    @property
    def interval_ms(self) -> float:
        return 1000.0 / self.per_second

    @property
    def window_seconds(self) -> float:
        """How long an emptied bucket takes to fill again."""
        return self.burst / self.per_second


_LOGGED_IDS = ("tenant_id", "department_id", "key_id")


@dataclass(frozen=True, slots=True)
class Scope:
    """Every service call takes one; every query is filtered by it.

    ``department_id`` is None for a tenant-wide caller (an operator on the CLI); ``key_id`` is None
    when the caller is not an API key.
    """

    tenant_id: uuid.UUID
    schema: str
    department_id: uuid.UUID | None = None
    key_id: uuid.UUID | None = None
    key_rate: Rate | None = None  # the key's own rate limit, when it has one
    _logged_ids: dict[str, str | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        checked_schema_name(self.schema)

    def logged_ids(self) -> dict[str, str | None]:
        """``tenant_id``, ``department_id`` and ``key_id`` as a log line names them, written once
        for the Scope (a key's Scope serves all its requests, and writing a UUID's text is not
        cheap)."""
        if self._logged_ids is None:
            ids = (self.tenant_id, self.department_id, self.key_id)
            written = dict(
                zip(_LOGGED_IDS, (str(id_) if id_ else None for id_ in ids), strict=True)
            )
            object.__setattr__(self, "_logged_ids", written)
            return written
        return self._logged_ids

    @classmethod
    def for_tenant(cls, tenant_id: uuid.UUID) -> Scope:
        return cls(tenant_id=tenant_id, schema=schema_for_tenant(tenant_id))

    def in_department(self, department_id: uuid.UUID) -> Scope:
        return replace(self, department_id=department_id)
