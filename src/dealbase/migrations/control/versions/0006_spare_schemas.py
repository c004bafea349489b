"""Spare tenant schemas, made ahead of time so that creating a tenant runs no DDL."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "c0006"
down_revision = "c0005"


def upgrade() -> None:
    op.create_table(
        "spare_schemas",
        sa.Column("schema_name", sa.Text(), primary_key=True),
        sa.Column("schema_revision", sa.Text(), nullable=False),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        schema="control",
    )
    op.create_index(
        "spare_schemas_oldest",
        "spare_schemas",
        ["schema_revision", "created_at"],
        schema="control",
    )


def downgrade() -> None:
    op.drop_table("spare_schemas", schema="control")
