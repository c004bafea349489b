"""A key's own rate limit, overriding the default."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0002"
down_revision = "c0001"


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("rate_per_second", sa.Float()), schema="control")
    op.add_column("api_keys", sa.Column("rate_burst", sa.Integer()), schema="control")
    op.create_check_constraint(
        "api_keys_rate_override",
        "api_keys",
        "(rate_per_second IS NULL) = (rate_burst IS NULL)"
        " AND (rate_per_second IS NULL OR (rate_per_second > 0 AND rate_burst >= 1))",
        schema="control",
    )


def downgrade() -> None:
    op.drop_constraint("api_keys_rate_override", "api_keys", schema="control", type_="check")
    op.drop_column("api_keys", "rate_burst", schema="control")
    op.drop_column("api_keys", "rate_per_second", schema="control")
