"""The events outbox (the feed and what webhooks deliver) and the webhook endpoints."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "t0004"
down_revision = "t0003"


def upgrade() -> None:
    # One row per department: the position of its last event. Written by the statement that
    # records a transaction's events, as its last; the row lock, held until commit, gives the
    # department's events their positions in commit order.
    op.create_table(
        "event_positions",
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), primary_key=True),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        # The resource in its REST shape; for an update, the fields it changed and their values
        # before.
        sa.Column("data", pg.JSONB(), nullable=False),
        sa.Column("changed_fields", pg.ARRAY(sa.Text())),
        sa.Column("previous", pg.JSONB()),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.UniqueConstraint("department_id", "position"),
    )
    op.create_index("events_created", "events", ["created_at"])
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        # Event types, or the one element "*" for every type.
        sa.Column("event_types", pg.ARRAY(sa.Text()), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
        # Why the endpoint was disabled by delivery (a 410, three days of failures); null when
        # enabled or disabled by its owner.
        sa.Column("disabled_reason", sa.Text()),
        sa.Column("description", sa.Text()),
        # Events of the endpoint in commit order, one at a time; false: in parallel, any order.
        sa.Column("ordered", sa.Boolean(), nullable=False, server_default=sa.true()),
        # Standard Webhooks: "whsec_" + base64 of the key. The previous one signs too until it
        # expires (a rotation's overlap).
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text()),
        sa.Column("previous_secret_expires_at", pg.TIMESTAMP(timezone=True)),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("updated_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="1"),
    )
    op.create_index("webhook_endpoints_department_id", "webhook_endpoints", ["department_id", "id"])


def downgrade() -> None:
    op.drop_table("webhook_endpoints")
    op.drop_table("events")
    op.drop_table("event_positions")
