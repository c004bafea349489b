"""The webhook worker's wakeups: which tenant schemas have deliveries to make, and when."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

from dealbase.tenancy.roles import TENANTS_GROUP_ROLE

revision = "c0004"
down_revision = "c0003"


def upgrade() -> None:
    # A row says: visit this schema from ``due_at`` on. A tenant's transaction that records
    # events for a webhook endpoint adds one as the tenant's role (only its own schema's, and
    # only that column: row security and a column grant); the worker claims, reschedules and
    # deletes them as the login role, which owns the table.
    op.create_table(
        "webhook_wakeups",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("schema_name", sa.Text(), nullable=False),
        sa.Column(
            "due_at", pg.TIMESTAMP(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        # The worker visiting the schema now; its claim lapses at due_at, when another may.
        sa.Column("claimed_by", pg.UUID()),
        schema="control",
    )
    op.create_index("webhook_wakeups_due_at", "webhook_wakeups", ["due_at"], schema="control")
    op.create_index(
        "webhook_wakeups_schema_name", "webhook_wakeups", ["schema_name"], schema="control"
    )
    op.execute("ALTER TABLE control.webhook_wakeups ENABLE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY own_schema_only ON control.webhook_wakeups FOR INSERT"
        f' TO "{TENANTS_GROUP_ROLE}" WITH CHECK (schema_name = current_user)'
    )
    op.execute(f'GRANT USAGE ON SCHEMA control TO "{TENANTS_GROUP_ROLE}"')
    op.execute(f'GRANT INSERT (schema_name) ON control.webhook_wakeups TO "{TENANTS_GROUP_ROLE}"')
    # Work done now and then by one worker of all (the events purge): when it last ran.
    op.create_table(
        "worker_tasks",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("last_run_at", pg.TIMESTAMP(timezone=True), nullable=False),
        schema="control",
    )


def downgrade() -> None:
    op.drop_table("worker_tasks", schema="control")
    op.execute(f'REVOKE USAGE ON SCHEMA control FROM "{TENANTS_GROUP_ROLE}"')
    op.drop_table("webhook_wakeups", schema="control")
