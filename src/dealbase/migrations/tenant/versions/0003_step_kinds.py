"""Steps say whether a deal in them is open, won or lost."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dealbase.migrations.tenant_operations import add_required_column

revision = "t0003"
down_revision = "t0002"


def upgrade() -> None:
    add_required_column("steps", "kind", sa.Text(), "'open'")
    op.create_check_constraint("steps_kind", "steps", "kind IN ('open', 'won', 'lost')")
    # Departments made before this revision have the default pipeline's Won and Lost steps.
    op.execute("UPDATE steps SET kind = 'won' WHERE name = 'Won'")
    op.execute("UPDATE steps SET kind = 'lost' WHERE name = 'Lost'")


def downgrade() -> None:
    op.drop_constraint("steps_kind", "steps", type_="check")
    op.drop_column("steps", "kind")
