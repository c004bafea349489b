"""Tenants and API keys."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "c0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False, unique=True),
        sa.Column("schema_name", sa.Text(), nullable=False, unique=True),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        schema="control",
    )
    op.create_table(
        "api_keys",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("tenant_id", pg.UUID(), sa.ForeignKey("control.tenants.id"), nullable=False),
        sa.Column("department_id", pg.UUID()),
        sa.Column("name", sa.Text()),
        sa.Column("secret_hash", pg.BYTEA(), nullable=False),
        sa.Column("previous_secret_hash", pg.BYTEA()),
        sa.Column("previous_secret_expires_at", pg.TIMESTAMP(timezone=True)),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("rotated_at", pg.TIMESTAMP(timezone=True)),
        sa.Column("revoked_at", pg.TIMESTAMP(timezone=True)),
        schema="control",
    )
    op.create_index("api_keys_tenant_id", "api_keys", ["tenant_id"], schema="control")


def downgrade() -> None:
    op.drop_table("api_keys", schema="control")
    op.drop_table("tenants", schema="control")
