"""Periodic work that one worker of all does, however many run (the events purge)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert

from dealbase.tenancy.control_tables import worker_tasks


def claim_task(connection: Connection, name: str, now: datetime, every: timedelta) -> bool:
    """True for the one caller that finds the task last run ``every`` or longer ago (or never),
    which it now has run at ``now``; False for every other."""
    claimed = connection.execute(
        insert(worker_tasks)
        .values(name=name, last_run_at=now)
        .on_conflict_do_update(
            index_elements=[worker_tasks.c.name],
            set_={"last_run_at": now},
            where=worker_tasks.c.last_run_at <= now - every,
        )
        .returning(worker_tasks.c.name)
    ).first()
    return claimed is not None
