"""Tables of the shared ``control`` schema: what must be known before the tenant is."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Identity,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import BYTEA, JSONB, TIMESTAMP, UUID

CONTROL_SCHEMA = "control"

metadata = MetaData(schema=CONTROL_SCHEMA)

tenants = Table(
    "tenants",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    # Unique among tenants not deleted (the index ``tenants_live_name``).
    Column("name", Text, nullable=False),
    Column("schema_name", Text, nullable=False, unique=True),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False),
    # The tenant tree's revision the migrator last brought the schema to; None counts as behind.
    Column("schema_revision", Text),
    # A suspended tenant's keys are refused (403); its data stays.
    Column("suspended_at", TIMESTAMP(timezone=True)),
    # The schema and role are dropped; the row stays for the keys and audit that refer to it.
    Column("deleted_at", TIMESTAMP(timezone=True)),
)


def _audit(name: str, *subject: Column[Any]) -> Table:
    """An audit table: one row per change an operator made to a tenant's ``subject``, what
    (``action``), who, when, and the change's other arguments (``details``)."""
    return Table(
        name,
        metadata,
        Column("id", BigInteger, Identity(always=True), primary_key=True),
        Column("tenant_id", UUID(as_uuid=True), ForeignKey(tenants.c.id), nullable=False),
        *subject,
        Column("action", Text, nullable=False),
        Column("actor", Text, nullable=False),
        Column("at", TIMESTAMP(timezone=True), nullable=False),
        Column("details", JSONB, nullable=False),
    )


# What operators did to tenants (suspended, resumed, deleted), one row per change.
tenant_audit = _audit("tenant_audit")

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("tenant_id", UUID(as_uuid=True), ForeignKey(tenants.c.id), nullable=False),
    # No foreign key: departments live in the tenant's own schema, which control never references.
    Column("department_id", UUID(as_uuid=True)),
    Column("name", Text),
    Column("secret_hash", BYTEA, nullable=False),
    Column("previous_secret_hash", BYTEA),
    Column("previous_secret_expires_at", TIMESTAMP(timezone=True)),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False),
    Column("rotated_at", TIMESTAMP(timezone=True)),
    Column("revoked_at", TIMESTAMP(timezone=True)),
    # Both or neither: the key's own rate limit, else the default.
    Column("rate_per_second", Float),
    Column("rate_burst", Integer),
    # None: the key never expires. Checked on every request, against the server's clock.
    Column("expires_at", TIMESTAMP(timezone=True)),
    # Written in batches by the server processes, at most once a minute per key and process.
    Column("last_used_at", TIMESTAMP(timezone=True)),
)

# What operators did to keys, one row per change, written in the change's own transaction.
# Never a secret nor a hash of one: ``details`` holds the change's other arguments.
api_key_audit = _audit(
    "api_key_audit",
    Column("key_id", UUID(as_uuid=True), ForeignKey(api_keys.c.id), nullable=False),
)

# A tenant schema the webhook worker should visit from ``due_at`` on (``tenancy.wakeups``).
webhook_wakeups = Table(
    "webhook_wakeups",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("schema_name", Text, nullable=False),
    Column("due_at", TIMESTAMP(timezone=True), nullable=False),
    Column("claimed_by", UUID(as_uuid=True)),
)

# Periodic work that one worker of all does (the events purge), and when it last ran.
worker_tasks = Table(
    "worker_tasks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("last_run_at", TIMESTAMP(timezone=True), nullable=False),
)

# Tenant schemas made ahead of time, each with its role, at a revision of the tenant tree:
# creating a tenant takes one (``tenancy.spare_schemas``) instead of running the DDL.
spare_schemas = Table(
    "spare_schemas",
    metadata,
    Column("schema_name", Text, primary_key=True),
    Column("schema_revision", Text, nullable=False),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False),
)
