"""Operations tenant migrations use where Alembic's own would cost more with every tenant.

``ALTER TABLE … ADD COLUMN … DEFAULT … NOT NULL`` makes PostgreSQL look for uses of the table's
row type across the catalog (``find_composite_type_dependencies``), which holds every tenant's
objects, so each such column costs more with every tenant; without the default it does not.
Over ten thousand schemas, and in every new schema, which replays the history, that is the
difference between seconds and many minutes.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op


def add_required_column(
    table: str, name: str, type_: sa.types.TypeEngine[Any], default: str
) -> None:
    """A NOT NULL column with a default (``default`` is SQL), in four statements none of which
    looks beyond the table: add it nullable, give it its default, fill the existing rows, then
    require it. The result is the same column as ``op.add_column`` with ``server_default``."""
    op.add_column(table, sa.Column(name, type_, nullable=True))
    op.alter_column(table, name, server_default=sa.text(default))
    op.execute(f"UPDATE {table} SET {name} = {default}")  # noqa: S608 (names and SQL of ours)
    op.alter_column(table, name, nullable=False)
