"""The tenant's custom fields: one row each, whose values a column ``cf_<name>`` of its
record's table holds (added and dropped by ``platform.custom_fields``, not by migrations)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "t0013"
down_revision = "t0012"


def upgrade() -> None:
    op.create_table(
        "custom_fields",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("max_length", sa.Integer()),
        sa.Column("options", pg.JSONB()),
        sa.Column("required", sa.Boolean(), nullable=False),
        sa.Column("unique", sa.Boolean(), nullable=False),
        sa.Column("filterable", sa.Boolean(), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="1"),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("updated_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.UniqueConstraint("record", "name", name="custom_fields_record_name_key"),
        sa.CheckConstraint(
            "record IN ('customer', 'deal', 'activity')", name="custom_fields_record"
        ),
    )


def downgrade() -> None:
    op.drop_table("custom_fields")
