"""Row versions for ETags, keyset indexes for lists, idempotency records."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

from dealbase.migrations.tenant_operations import add_required_column

revision = "t0002"
down_revision = "t0001"

VERSIONED = ("customers", "deals", "activities")


def upgrade() -> None:
    for table in VERSIONED:
        add_required_column(table, "version", sa.BigInteger(), "1")
    # Lists page by (department_id, id): ids are UUIDv7, so id order is creation order.
    op.drop_index("customers_department_created", "customers")
    op.drop_index("deals_department_created", "deals")
    op.create_index("customers_department_id", "customers", ["department_id", "id"])
    op.create_index(
        "customers_department_email", "customers", ["department_id", sa.text("lower(email)")]
    )
    op.create_index("deals_department_id", "deals", ["department_id", "id"])
    op.create_index("activities_department_id", "activities", ["department_id", "id"])
    # An activity outlives its deal (it still belongs to its customer): unlink instead of delete.
    op.drop_constraint("activities_deal_id_fkey", "activities", type_="foreignkey")
    op.create_foreign_key(
        "activities_deal_id_fkey", "activities", "deals", ["deal_id"], ["id"], ondelete="SET NULL"
    )
    op.create_table(
        "idempotency_records",
        sa.Column("api_key_id", pg.UUID(), primary_key=True),
        sa.Column("idempotency_key", sa.Text(), primary_key=True),
        sa.Column("fingerprint", pg.BYTEA(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("body", pg.BYTEA(), nullable=False),
        sa.Column("location", sa.Text()),
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
    )
    op.create_index("idempotency_records_created", "idempotency_records", ["created_at"])


def downgrade() -> None:
    op.drop_table("idempotency_records")
    op.drop_constraint("activities_deal_id_fkey", "activities", type_="foreignkey")
    op.create_foreign_key(
        "activities_deal_id_fkey", "activities", "deals", ["deal_id"], ["id"], ondelete="CASCADE"
    )
    op.drop_index("activities_department_id", "activities")
    op.drop_index("deals_department_id", "deals")
    op.drop_index("customers_department_email", "customers")
    op.drop_index("customers_department_id", "customers")
    op.create_index("deals_department_created", "deals", ["department_id", "created_at", "id"])
    op.create_index(
        "customers_department_created", "customers", ["department_id", "created_at", "id"]
    )
    for table in VERSIONED:
        op.drop_column(table, "version")
