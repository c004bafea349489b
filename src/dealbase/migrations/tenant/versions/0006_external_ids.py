"""Customers, deals and activities carry an optional external id, unique in their department."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "t0006"
down_revision = "t0005"

TABLES = ("customers", "deals", "activities")


def upgrade() -> None:
    for table in TABLES:
        # Nullable and without a default: no table rewrite, no catalog search.
        op.add_column(table, sa.Column("external_id", sa.Text(), nullable=True))
        op.create_check_constraint(
            f"{table}_external_id_length",
            table,
            "char_length(external_id) BETWEEN 1 AND 255",
        )
        # The upsert's arbiter (ON CONFLICT) and the list filter's index. NULLs are distinct,
        # so the records without an external id do not collide.
        op.create_unique_constraint(
            f"{table}_external_id_key", table, ["department_id", "external_id"]
        )


def downgrade() -> None:
    for table in TABLES:
        op.drop_constraint(f"{table}_external_id_key", table, type_="unique")
        op.drop_constraint(f"{table}_external_id_length", table, type_="check")
        op.drop_column(table, "external_id")
