"""Webhook deliveries and their attempts; where each endpoint's delivery has got to."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

from dealbase.migrations.tenant_operations import add_required_column

revision = "t0005"
down_revision = "t0004"


def upgrade() -> None:
    # The position of the last event of its department the worker has made deliveries of; an
    # endpoint starts at its department's last position, so it receives what comes after it.
    add_required_column("webhook_endpoints", "scanned_position", sa.BigInteger(), "0")
    op.execute(
        "UPDATE webhook_endpoints e SET scanned_position = p.last_position"
        " FROM event_positions p WHERE p.department_id = e.department_id"
    )
    # Since when every attempt has failed (null after a success): three days disable it.
    op.add_column("webhook_endpoints", sa.Column("failing_since", pg.TIMESTAMP(timezone=True)))
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column(
            "endpoint_id",
            pg.UUID(),
            sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
            nullable=False,
        ),
        # The event delivered; null for a test event, whose body is ``payload``. A delivery is
        # kept as long as its event.
        sa.Column("event_id", pg.UUID(), sa.ForeignKey("events.id", ondelete="CASCADE")),
        sa.Column("event_type", sa.Text(), nullable=False),
        # The event's position, for an ordered endpoint: its deliveries go in this order, one at
        # a time. Null for an endpoint that is not ordered (as it was when the event came) and
        # for a test event: those go in any order.
        sa.Column("position", sa.BigInteger()),
        sa.Column("payload", pg.JSONB()),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempt_count", sa.Integer(), nullable=False, server_default="0"),
        # When a pending delivery is next tried; null once it is delivered or failed.
        sa.Column("next_attempt_at", pg.TIMESTAMP(timezone=True)),
        # A worker is sending it until then; after that another may.
        sa.Column("leased_until", pg.TIMESTAMP(timezone=True)),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        # When its current run of attempts began (creation, or a redelivery): retries end three
        # days later.
        sa.Column("started_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("delivered_at", pg.TIMESTAMP(timezone=True)),
        sa.CheckConstraint(
            "state IN ('pending', 'delivered', 'failed')", name="webhook_deliveries_state"
        ),
        sa.UniqueConstraint("endpoint_id", "event_id"),
    )
    op.create_index(
        "webhook_deliveries_pending",
        "webhook_deliveries",
        ["endpoint_id", "position"],
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index("webhook_deliveries_log", "webhook_deliveries", ["endpoint_id", "id"])
    # What is due of the deliveries that go in any order.
    op.create_index(
        "webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("state = 'pending' AND position IS NULL"),
    )
    op.create_index("webhook_deliveries_created", "webhook_deliveries", ["created_at"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column(
            "delivery_id",
            pg.UUID(),
            sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("attempted_at", pg.TIMESTAMP(timezone=True), nullable=False),
        # Null when no answer came (refused, timed out, an address not allowed).
        sa.Column("status_code", sa.Integer()),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        # Null on success.
        sa.Column("error", sa.Text()),
    )
    op.create_index("webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id", "id"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_column("webhook_endpoints", "failing_since")
    op.drop_column("webhook_endpoints", "scanned_position")
