"""Tenant lifecycle (suspended, deleted, and its audit) and each schema's recorded revision."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "c0005"
down_revision = "c0004"


def upgrade() -> None:
    # The tenant tree's revision the schema was last brought to, written by the migrator in the
    # same transaction: ``migrate`` knows which schemas are behind from this one column. NULL
    # (every schema migrated before the column existed) counts as behind.
    op.add_column("tenants", sa.Column("schema_revision", sa.Text()), schema="control")
    op.add_column(
        "tenants", sa.Column("suspended_at", pg.TIMESTAMP(timezone=True)), schema="control"
    )
    # A deleted tenant's row stays (its keys and audit refer to it); its schema and role are gone
    # and its name is free again.
    op.add_column("tenants", sa.Column("deleted_at", pg.TIMESTAMP(timezone=True)), schema="control")
    op.drop_constraint("tenants_name_key", "tenants", schema="control")
    op.create_index(
        "tenants_live_name",
        "tenants",
        ["name"],
        unique=True,
        schema="control",
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    op.create_table(
        "tenant_audit",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("tenant_id", pg.UUID(), sa.ForeignKey("control.tenants.id"), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("details", pg.JSONB(), nullable=False),
        schema="control",
    )
    op.create_index("tenant_audit_tenant_id", "tenant_audit", ["tenant_id"], schema="control")


def downgrade() -> None:
    op.drop_table("tenant_audit", schema="control")
    op.drop_index("tenants_live_name", "tenants", schema="control")
    op.create_unique_constraint("tenants_name_key", "tenants", ["name"], schema="control")
    for column in ("deleted_at", "suspended_at", "schema_revision"):
        op.drop_column("tenants", column, schema="control")
