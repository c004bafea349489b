"""The tables of one tenant's schema, as SQLAlchemy Core sees them.

Every table sits in the placeholder schema ``tenant``. The unit of work maps that name onto the
calling tenant's real schema (``schema_translate_map``); a statement run outside a unit of work
therefore names a schema that does not exist and fails loudly instead of touching the wrong tenant.
The DDL itself lives in the tenant migrations (``dealbase/migrations/tenant``), never here.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Sequence,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, JSON, JSONB, TIMESTAMP, UUID

from dealbase.tenancy.scope import TENANT_SCHEMA_PLACEHOLDER

metadata = MetaData(schema=TENANT_SCHEMA_PLACEHOLDER)


def _timestamps() -> list[Column[object]]:
    return [
        Column("created_at", TIMESTAMP(timezone=True), nullable=False),
        Column("updated_at", TIMESTAMP(timezone=True), nullable=False),
    ]


def _external_id(table: str) -> list[Column[object] | UniqueConstraint]:
    """A client's own id for the row, unique in its department (``platform.external_ids``)."""
    return [
        Column("external_id", Text),
        UniqueConstraint("department_id", "external_id", name=f"{table}_external_id_key"),
    ]


def _version() -> Column[int]:
    """Bumped by every change of the row; the ETag of its resource."""
    return Column("version", BigInteger, nullable=False, server_default="1")


departments = Table(
    "departments",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("name", Text, nullable=False),
    *_timestamps(),
)

steps = Table(
    "steps",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("department_id", UUID(as_uuid=True), ForeignKey(departments.c.id), nullable=False),
    Column("name", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("kind", Text, nullable=False, server_default="open"),
    *_timestamps(),
    UniqueConstraint("department_id", "position"),
    UniqueConstraint("id", "department_id"),
)

employees = Table(
    "employees",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("department_id", UUID(as_uuid=True), ForeignKey(departments.c.id), nullable=False),
    Column("name", Text, nullable=False),
    Column("email", Text),
    *_timestamps(),
    UniqueConstraint("id", "department_id"),
)

CUSTOMER_TEXT_FIELDS = (
    "last_name",
    "first_name",
    "company",
    "website",
    "title",
    "phone_1",
    "phone_2",
    "phone_3",
    "phone_1_label",
    "phone_2_label",
    "phone_3_label",
    "email",
    "postcode",
    "address",
    "address_addition",
    "city",
    "country",
    "state",
    "contact_origin",
    "note",
)

customers = Table(
    "customers",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    # Its writer's department, not a declared key of it: migration t0009 says why.
    Column("department_id", UUID(as_uuid=True), nullable=False),
    *[Column(name, Text, nullable=name != "last_name") for name in CUSTOMER_TEXT_FIELDS],
    Column("birthday", Date),
    *_timestamps(),
    _version(),
    *_external_id("customers"),
)

deals = Table(
    "deals",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    # Its writer's department, not a declared key of it: migration t0009 says why.
    Column("department_id", UUID(as_uuid=True), nullable=False),
    Column("step_id", UUID(as_uuid=True), nullable=False),
    Column("employee_id", UUID(as_uuid=True)),
    Column("name", Text, nullable=False),
    Column("volume", BigInteger),
    Column("deal_origin", Text),
    Column("note", Text),
    *_timestamps(),
    _version(),
    *_external_id("deals"),
    ForeignKeyConstraint(["step_id", "department_id"], [steps.c.id, steps.c.department_id]),
    ForeignKeyConstraint(
        ["employee_id", "department_id"], [employees.c.id, employees.c.department_id]
    ),
)

deal_customers = Table(
    "deal_customers",
    metadata,
    Column(
        "deal_id", UUID(as_uuid=True), ForeignKey(deals.c.id, ondelete="CASCADE"), primary_key=True
    ),
    Column(
        "customer_id",
        UUID(as_uuid=True),
        ForeignKey(customers.c.id, ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("position", Integer, nullable=False),
)

activities = Table(
    "activities",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    # Its writer's department, not a declared key of it: migration t0009 says why.
    Column("department_id", UUID(as_uuid=True), nullable=False),
    Column("type", Text, nullable=False),
    Column("subject", Text),
    Column("note", Text),
    Column("due_at", TIMESTAMP(timezone=True)),
    Column("done_at", TIMESTAMP(timezone=True)),
    Column(
        "customer_id",
        UUID(as_uuid=True),
        ForeignKey(customers.c.id, ondelete="CASCADE"),
        nullable=False,
    ),
    Column("deal_id", UUID(as_uuid=True), ForeignKey(deals.c.id, ondelete="SET NULL")),
    Column("employee_id", UUID(as_uuid=True), ForeignKey(employees.c.id)),
    *_timestamps(),
    _version(),
    *_external_id("activities"),
)

idempotency_records = Table(
    "idempotency_records",
    metadata,
    Column("api_key_id", UUID(as_uuid=True), primary_key=True),
    Column("idempotency_key", Text, primary_key=True),
    Column("fingerprint", BYTEA, nullable=False),
    Column("status", Integer, nullable=False),
    Column("body", BYTEA, nullable=False),
    Column("location", Text),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False),
)

event_positions = Table(
    "event_positions",
    metadata,
    Column("department_id", UUID(as_uuid=True), ForeignKey(departments.c.id), primary_key=True),
    Column("last_position", BigInteger, nullable=False),
)

event_sequence = Sequence("event_sequence", metadata=metadata)

events = Table(
    "events",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    # Its writer's department, not a declared key of it: migration t0009 says why.
    Column("department_id", UUID(as_uuid=True), nullable=False),
    # 1, 2, 3... per department, given once the event's transaction has committed; null before.
    Column("position", BigInteger),
    # The order in which transactions recorded their events: one ``event_sequence`` number each.
    Column("sequence", BigInteger),
    Column("type", Text, nullable=False),
    # ``json``: kept as its writer made it (migration t0008).
    Column("data", JSON, nullable=False),
    Column("changed_fields", ARRAY(Text)),
    Column("previous", JSON),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False),
    # Numbered events only: an event goes in without a position (migration t0011).
    Index(
        "events_position",
        "department_id",
        "position",
        unique=True,
        postgresql_where=text("position IS NOT NULL"),
    ),
)

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("department_id", UUID(as_uuid=True), ForeignKey(departments.c.id), nullable=False),
    Column("url", Text, nullable=False),
    Column("event_types", ARRAY(Text), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default="true"),
    Column("disabled_reason", Text),
    Column("description", Text),
    Column("ordered", Boolean, nullable=False, server_default="true"),
    Column("secret", Text, nullable=False),
    Column("previous_secret", Text),
    Column("previous_secret_expires_at", TIMESTAMP(timezone=True)),
    Column("scanned_position", BigInteger, nullable=False, server_default="0"),
    Column("failing_since", TIMESTAMP(timezone=True)),
    *_timestamps(),
    _version(),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column(
        "endpoint_id",
        UUID(as_uuid=True),
        ForeignKey(webhook_endpoints.c.id, ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event_id", UUID(as_uuid=True), ForeignKey(events.c.id, ondelete="CASCADE")),
    Column("event_type", Text, nullable=False),
    Column("position", BigInteger),
    Column("payload", JSONB),
    Column("state", Text, nullable=False),
    Column("attempt_count", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", TIMESTAMP(timezone=True)),
    Column("leased_until", TIMESTAMP(timezone=True)),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False),
    Column("started_at", TIMESTAMP(timezone=True), nullable=False),
    Column("delivered_at", TIMESTAMP(timezone=True)),
    UniqueConstraint("endpoint_id", "event_id"),
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column(
        "delivery_id",
        UUID(as_uuid=True),
        ForeignKey(webhook_deliveries.c.id, ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempted_at", TIMESTAMP(timezone=True), nullable=False),
    Column("status_code", Integer),
    Column("duration_ms", Integer, nullable=False),
    Column("error", Text),
)

# A tenant's custom fields (``platform.custom_fields``): a column ``cf_<name>`` of the record's
# table holds each one's values, and is not declared here (it is the tenant's own).
custom_fields = Table(
    "custom_fields",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("record", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("label", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("max_length", Integer),
    Column("options", JSONB),
    Column("required", Boolean, nullable=False),
    Column("unique", Boolean, nullable=False),
    Column("filterable", Boolean, nullable=False),
    Column("archived", Boolean, nullable=False),
    _version(),
    *_timestamps(),
    UniqueConstraint("record", "name", name="custom_fields_record_name_key"),
)
