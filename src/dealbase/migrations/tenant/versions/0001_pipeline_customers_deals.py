"""Departments, steps, employees, customers, deals and activities."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "t0001"
down_revision = None


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", pg.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("updated_at", pg.TIMESTAMP(timezone=True), nullable=False),
    ]


CUSTOMER_TEXT_FIELDS = (
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


def upgrade() -> None:
    op.create_table(
        "departments",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        *_timestamps(),
    )
    op.create_table(
        "steps",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        *_timestamps(),
        sa.UniqueConstraint("department_id", "position"),
        sa.UniqueConstraint("id", "department_id"),
    )
    op.create_table(
        "employees",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("email", sa.Text()),
        *_timestamps(),
        sa.UniqueConstraint("id", "department_id"),
    )
    op.create_table(
        "customers",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("last_name", sa.Text(), nullable=False),
        *[sa.Column(name, sa.Text()) for name in CUSTOMER_TEXT_FIELDS],
        sa.Column("birthday", sa.Date()),
        *_timestamps(),
    )
    op.create_index(
        "customers_department_created", "customers", ["department_id", "created_at", "id"]
    )
    op.create_table(
        "deals",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("step_id", pg.UUID(), nullable=False),
        sa.Column("employee_id", pg.UUID()),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("volume", sa.BigInteger()),
        sa.Column("deal_origin", sa.Text()),
        sa.Column("note", sa.Text()),
        *_timestamps(),
        sa.ForeignKeyConstraint(["step_id", "department_id"], ["steps.id", "steps.department_id"]),
        sa.ForeignKeyConstraint(
            ["employee_id", "department_id"], ["employees.id", "employees.department_id"]
        ),
    )
    op.create_index("deals_department_created", "deals", ["department_id", "created_at", "id"])
    op.create_index("deals_step", "deals", ["step_id"])
    op.create_index("deals_employee", "deals", ["employee_id"])
    op.create_table(
        "deal_customers",
        sa.Column(
            "deal_id", pg.UUID(), sa.ForeignKey("deals.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column(
            "customer_id",
            pg.UUID(),
            sa.ForeignKey("customers.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
    )
    op.create_index("deal_customers_customer", "deal_customers", ["customer_id"])
    op.create_table(
        "activities",
        sa.Column("id", pg.UUID(), primary_key=True),
        sa.Column("department_id", pg.UUID(), sa.ForeignKey("departments.id"), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text()),
        sa.Column("note", sa.Text()),
        sa.Column("due_at", pg.TIMESTAMP(timezone=True)),
        sa.Column("done_at", pg.TIMESTAMP(timezone=True)),
        sa.Column(
            "customer_id",
            pg.UUID(),
            sa.ForeignKey("customers.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("deal_id", pg.UUID(), sa.ForeignKey("deals.id", ondelete="CASCADE")),
        sa.Column("employee_id", pg.UUID(), sa.ForeignKey("employees.id")),
        *_timestamps(),
        sa.CheckConstraint(
            "type IN ('call', 'email', 'meeting', 'task', 'note')", name="activities_type"
        ),
    )
    op.create_index("activities_customer", "activities", ["customer_id"])
    op.create_index("activities_deal", "activities", ["deal_id"])


def downgrade() -> None:
    for table in (
        "activities",
        "deal_customers",
        "deals",
        "customers",
        "employees",
        "steps",
        "departments",
    ):
        op.drop_table(table)
