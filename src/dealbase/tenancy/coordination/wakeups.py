"""Wakeups: how the webhook worker learns which tenant schemas have deliveries to make, without
looking into any schema that has none.

A row of ``control.webhook_wakeups`` says "visit this schema from ``due_at`` on". A tenant's
transaction adds one with its COMMIT when it commits something to deliver (``WakeWorker``), or,
for events, a transaction of its own right after (the events outbox): as the tenant's role,
which row security lets add only its own schema's name, and only that column. A row is visible
to the worker only once it has committed, after what it announces, so a worker that claims it
and then reads the schema sees what the row announced. Rows are never updated by tenants and
never merged, so no tenant transaction waits on another or on a worker.

The worker claims due rows for a lease (``claim``): they stay, due again when the lease ends, so
if the worker dies the schema is visited again. When the visit ends (``end_visit``) the worker
deletes the rows it claimed and adds one for the schema's next retry, if it has one. Deleting a
tenant deletes its schema's rows (``forget_schema``), and no visit adds one for it afterwards.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, exists, func, insert, literal, select, update

from dealbase.db.statements import built_once
from dealbase.db.transactions import TenantConnection
from dealbase.tenancy.control_tables import tenants, webhook_wakeups


class WakeWorker:
    """A unit of work's finisher: adds the wakeup for its tenant's schema with its COMMIT, once
    however often it was asked for."""

    def before_commit(self, connection: TenantConnection) -> None:
        connection.defer(WAKEUP, {})

    def after_commit(self, connection: TenantConnection) -> None:
        pass


# The wakeup for the running unit of work's schema, due now; inline: no RETURNING of the id,
# which the tenant may not read.
WAKEUP = built_once(insert(webhook_wakeups).inline().values(schema_name=func.current_user()))


def claim(
    connection: Connection, worker: uuid.UUID, now: datetime, lease: timedelta, limit: int
) -> list[str]:
    """The schemas of up to ``limit`` due wakeups, each claimed with all its other due wakeups
    until ``now + lease``: rows another worker has claimed are skipped, not waited for."""
    picked = (
        select(webhook_wakeups.c.id, webhook_wakeups.c.schema_name)
        .where(webhook_wakeups.c.due_at <= now)
        .order_by(webhook_wakeups.c.due_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    siblings = (
        select(webhook_wakeups.c.id)
        .where(
            webhook_wakeups.c.schema_name.in_(select(picked.c.schema_name)),
            webhook_wakeups.c.due_at <= now,
        )
        .with_for_update(skip_locked=True)
        .cte("siblings")
    )
    claimed = connection.execute(
        update(webhook_wakeups)
        .where(
            webhook_wakeups.c.id.in_(
                select(picked.c.id).union(select(siblings.c.id)).scalar_subquery()
            )
        )
        .values(due_at=now + lease, claimed_by=worker)
        .returning(webhook_wakeups.c.schema_name)
    ).scalars()
    return sorted(set(claimed))


def end_visit(
    connection: Connection, worker: uuid.UUID, schema: str, next_due: datetime | None
) -> None:
    """Deletes the schema's wakeups ``worker`` claimed and, when the schema has a retry due at
    ``next_due``, adds a wakeup for it, unless one due no later is waiting already (that one
    will visit, and schedule what is due then) or its tenant is deleted."""
    connection.execute(
        delete(webhook_wakeups).where(
            webhook_wakeups.c.schema_name == schema, webhook_wakeups.c.claimed_by == worker
        )
    )
    if next_due is None:
        return
    waiting = exists().where(
        webhook_wakeups.c.schema_name == schema,
        webhook_wakeups.c.claimed_by.is_(None),
        webhook_wakeups.c.due_at <= next_due,
    )
    # Shares the tenant's row lock: a deletion under way (which holds it) is waited for and
    # then seen, and one that comes after waits for this row to commit and deletes it.
    live = (
        select(tenants.c.id)
        .where(tenants.c.schema_name == schema, tenants.c.deleted_at.is_(None))
        .with_for_update(read=True)
        .exists()
    )
    connection.execute(
        insert(webhook_wakeups).from_select(
            ["schema_name", "due_at"],
            select(literal(schema), literal(next_due)).where(~waiting, live),
        )
    )


def forget_schema(connection: Connection, schema: str) -> int:
    """Deletes every wakeup of the schema, claimed or not (its tenant is being deleted); returns
    how many there were."""
    return connection.execute(
        delete(webhook_wakeups).where(webhook_wakeups.c.schema_name == schema)
    ).rowcount
