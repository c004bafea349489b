"""Events are numbered after their transaction commits, not by the writers: a writer inserts its
events with no position, and whoever reads the feed (or the webhook worker) numbers the committed
ones under the department's position row. The writers of a department share no lock.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "t0007"
down_revision = "t0006"


def upgrade() -> None:
    # The order in which transactions recorded their events: one number a transaction, taken
    # by the statement that records them, its last before COMMIT. A transaction that waited for
    # another's row lock records after that one has committed, so among events numbered together
    # the later change comes later. (Within a transaction, events follow their ids.)
    op.execute("CREATE SEQUENCE event_sequence AS bigint")
    # Nullable: no table rewrite; the events already there keep their positions.
    op.add_column("events", sa.Column("sequence", sa.BigInteger(), nullable=True))
    op.execute("ALTER SEQUENCE event_sequence OWNED BY events.sequence")
    # Null until numbered.
    op.alter_column("events", "position", nullable=True)
    op.create_index(
        "events_unnumbered",
        "events",
        ["department_id", "sequence", "id"],
        postgresql_where=sa.text("position IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("events_unnumbered", "events")
    # The events not yet numbered are numbered as the feed would, after their department's last.
    op.execute(
        "INSERT INTO event_positions (department_id, last_position)"
        " SELECT DISTINCT department_id, 0 FROM events WHERE position IS NULL"
        " ON CONFLICT (department_id) DO NOTHING"
    )
    op.execute(
        "UPDATE events e SET position = p.last_position + n.number"
        " FROM (SELECT id, row_number() OVER (PARTITION BY department_id ORDER BY sequence, id)"
        "       AS number FROM events WHERE position IS NULL) n, event_positions p"
        " WHERE e.id = n.id AND p.department_id = e.department_id"
    )
    op.execute(
        "UPDATE event_positions p SET last_position = m.last"
        " FROM (SELECT department_id, max(position) AS last FROM events GROUP BY department_id) m"
        " WHERE m.department_id = p.department_id"
    )
    op.alter_column("events", "position", nullable=False)
    op.drop_column("events", "sequence")
