"""Positions for committed events: each department's events are numbered after they commit,
by whoever next reads them (the feed, the webhook worker, a live hub), under the department's
position row (``event_positions``), so positions count up in commit order (events.service)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, bindparam, column, exists, func, literal, select, true, update
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.selectable import Select

from dealbase.db.statements import built_once
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.platform.tables import event_positions, events

_departments = bindparam("departments", type_=ARRAY(UUID(as_uuid=True)))


def _claim_statement() -> ReturningInsert[Any]:
    """Locks the position row of each department that has events to number (made at its first),
    in department order: two numberings of the same departments never deadlock."""
    wanted = (
        func.unnest(_departments)
        .table_valued(column("department_id", UUID(as_uuid=True)))
        .render_derived(name="wanted")
    )
    unnumbered = exists().where(
        events.c.department_id == wanted.c.department_id, events.c.position.is_(None)
    )
    claim = pg_insert(event_positions).from_select(
        ["department_id", "last_position"],
        select(wanted.c.department_id, literal(0, BigInteger))
        .where(unnumbered)
        .order_by(wanted.c.department_id),
    )
    return claim.on_conflict_do_update(
        index_elements=[event_positions.c.department_id],
        set_={"last_position": event_positions.c.last_position},
    ).returning(event_positions.c.department_id)


def _number_statement() -> Select[Any]:
    """Numbers up to ``limit`` of each claimed department's unnumbered events, in the order
    they were recorded, after its last position, and moves the position on; returns how many."""
    claimed = (
        func.unnest(_departments)
        .table_valued(column("department_id", UUID(as_uuid=True)))
        .render_derived(name="claimed")
    )
    batch = (
        select(events.c.id, events.c.sequence)
        .where(events.c.department_id == claimed.c.department_id, events.c.position.is_(None))
        .order_by(events.c.sequence, events.c.id)
        .limit(bindparam("limit"))
        .lateral("batch")
    )
    pending = (
        select(
            claimed.c.department_id,
            batch.c.id,
            func.row_number()
            .over(partition_by=claimed.c.department_id, order_by=(batch.c.sequence, batch.c.id))
            .label("number"),
        )
        .select_from(claimed)
        .join(batch, true())
        .cte("pending")
    )
    numbered = (
        update(events)
        .where(
            events.c.id == pending.c.id, event_positions.c.department_id == pending.c.department_id
        )
        .values(position=event_positions.c.last_position + pending.c.number)
        .returning(events.c.department_id, events.c.position)
        .cte("numbered")
    )
    last = (
        select(numbered.c.department_id, func.max(numbered.c.position).label("position"))
        .group_by(numbered.c.department_id)
        .subquery("last")
    )
    moved = (
        update(event_positions)
        .where(event_positions.c.department_id == last.c.department_id)
        .values(last_position=last.c.position)
        .cte("moved")
    )
    return select(func.count()).select_from(numbered).add_cte(moved)


_CLAIM = built_once(_claim_statement())
_NUMBER = built_once(_number_statement())


def number_committed(
    connection: TenantConnection, department_ids: Sequence[uuid.UUID], limit: int
) -> int:
    """Gives positions to up to ``limit`` events of each department that committed without one,
    after the department's last position; returns how many.

    Two statements, so that the second reads the events with a snapshot taken once it holds the
    position rows: whatever an earlier numbering of the same department committed, it sees.
    The rows stay locked until COMMIT; the department's writers never take them.
    """
    numbering = number_committed_later(connection, department_ids, limit)
    return 0 if numbering is None else int(numbering.rows().scalar_one())


def number_committed_later(
    connection: TenantConnection, department_ids: Sequence[uuid.UUID], limit: int
) -> Deferred | None:
    """``number_committed``'s claim sent now, its numbering with the next round trip (the
    read that follows it, and the COMMIT, when nothing else runs): the position rows are held
    for that one round trip, not for every turn of the server's work until the COMMIT. None
    when no department has events to number."""
    claimed = [
        department_id
        for (department_id,) in connection.execute(
            _CLAIM,
            {"departments": list(department_ids)},
        )
    ]
    if not claimed:
        return None
    return connection.defer(_NUMBER, {"departments": claimed, "limit": limit})
