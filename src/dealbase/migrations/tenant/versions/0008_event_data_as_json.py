"""An event's ``data`` and ``previous`` are kept as ``json``, the text its writer made, not parsed
into ``jsonb``: a write's statement builds its record's JSON once, for its answer and its event,
and nothing reads inside an event's data in SQL.
"""

from __future__ import annotations

from alembic import op

revision = "t0008"
down_revision = "t0007"


def upgrade() -> None:
    # One rewrite of the table, whose events are at most the retention period's.
    op.execute(
        "ALTER TABLE events ALTER COLUMN data TYPE json USING data::json,"
        " ALTER COLUMN previous TYPE json USING previous::json"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE events ALTER COLUMN data TYPE jsonb USING data::jsonb,"
        " ALTER COLUMN previous TYPE jsonb USING previous::jsonb"
    )
