"""The tables every write inserts into (customers, deals, activities, events) no longer declare
their ``department_id`` a foreign key of ``departments``.

A declared key made PostgreSQL check each inserted row against its department's row with a
``FOR KEY SHARE`` lock: every writer of a department locked the same row, which PostgreSQL
records as a multixact made anew by each locker (the row's lockers so far, and this one) under
an exclusive lock of that row's page: writers of one department queued on it. Every row's
department is its writer's scope (a department key's own, or one a tenant-wide key named and
the unit of work found), and no department is ever deleted: nothing the key guarded against can
happen.
``steps`` and ``employees`` keep theirs, and a deal's step and employee keep theirs, which
also hold them to the deal's department.
"""

from __future__ import annotations

from alembic import op

revision = "t0009"
down_revision = "t0008"

WRITTEN_TABLES = ("customers", "deals", "activities", "events")


def upgrade() -> None:
    for table in WRITTEN_TABLES:
        op.drop_constraint(f"{table}_department_id_fkey", table, type_="foreignkey")


def downgrade() -> None:
    for table in WRITTEN_TABLES:
        op.create_foreign_key(
            f"{table}_department_id_fkey", table, "departments", ["department_id"], ["id"]
        )
