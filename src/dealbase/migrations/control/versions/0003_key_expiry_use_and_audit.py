"""A key's expiry and last use, and the audit trail of what operators did to keys."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "c0003"
down_revision = "c0002"


def upgrade() -> None:
    op.add_column(
        "api_keys", sa.Column("expires_at", pg.TIMESTAMP(timezone=True)), schema="control"
    )
    op.add_column(
        "api_keys", sa.Column("last_used_at", pg.TIMESTAMP(timezone=True)), schema="control"
    )
    op.create_table(
        "api_key_audit",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("tenant_id", pg.UUID(), sa.ForeignKey("control.tenants.id"), nullable=False),
        sa.Column("key_id", pg.UUID(), sa.ForeignKey("control.api_keys.id"), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("details", pg.JSONB(), nullable=False),
        sa.CheckConstraint(
            "action IN ('issue', 'rotate', 'revoke', 'reset', 'rate')",
            name="api_key_audit_action",
        ),
        schema="control",
    )
    op.create_index(
        "api_key_audit_tenant_id", "api_key_audit", ["tenant_id", "at", "id"], schema="control"
    )


def downgrade() -> None:
    op.drop_table("api_key_audit", schema="control")
    op.drop_column("api_keys", "last_used_at", schema="control")
    op.drop_column("api_keys", "expires_at", schema="control")
