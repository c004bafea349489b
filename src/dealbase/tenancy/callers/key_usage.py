"""Each key's ``last_used_at``, kept off the request's path.

Authentication only notes in memory when a key was last accepted. A background task writes the
noted uses in one batched statement every ``flush_interval_seconds`` (a minute by default), so a
key busy on every request costs one write a minute per server process, never one per request.
A flush that fails (the database is down) keeps its uses for the next one.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from functools import partial

import structlog
from anyio import to_thread
from sqlalchemy import Connection, bindparam, column, func, or_, update
from sqlalchemy.dialects.postgresql import ARRAY, TIMESTAMP, UUID

from dealbase.db.database import Database
from dealbase.tenancy.control_tables import api_keys

log = structlog.get_logger(__name__)

FLUSH_INTERVAL_SECONDS = 60.0


class KeyUseRecorder:
    """One per server process: ``note`` on the request's path, ``flush`` off it."""

    def __init__(
        self,
        database: Database,
        flush_interval_seconds: float = FLUSH_INTERVAL_SECONDS,
        *,
        now: Callable[[], datetime] = partial(datetime.now, UTC),
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._database = database
        self.flush_interval_seconds = flush_interval_seconds
        # When a use happened, and how the periodic flush waits out an interval: a test's own
        # clock and wait let it decide when time passes.
        self._now = now
        self._sleep = sleep
        # Key id to its last use. Held only to set or swap an entry: requests never wait long.
        self._last_uses: dict[uuid.UUID, datetime] = {}
        self._lock = threading.Lock()
        # One flush at a time: the last one, at shutdown, waits for one still running (whose
        # uses it may have to put back) instead of racing it.
        self._flushing = threading.Lock()

    def note(self, key_id: uuid.UUID) -> None:
        """Called for every accepted request: a dictionary write, no I/O."""
        now = self._now()
        with self._lock:
            self._last_uses[key_id] = now

    def flush(self) -> bool:
        """Writes the uses noted since the last flush; False (and logged) when the database
        refused, the uses then kept for the next flush. Blocks: call it off the event loop."""
        with self._flushing:
            with self._lock:
                last_uses, self._last_uses = self._last_uses, {}
            if not last_uses:
                return True
            try:
                with self._database.control() as connection:
                    record_uses(connection, last_uses)
            except Exception as exc:
                # Whatever went wrong, a background write must not end the task that makes it,
                # and the uses are not lost: they wait for the next flush.
                with self._lock:
                    for key_id, used_at in last_uses.items():
                        later = self._last_uses.get(key_id)
                        if later is None or later < used_at:
                            self._last_uses[key_id] = used_at
                log.warning(
                    "key_uses_not_recorded",
                    keys=len(last_uses),
                    error=(str(exc).strip().splitlines() or [repr(exc)])[0],
                    retry_in_s=self.flush_interval_seconds,
                )
                return False
            return True

    async def flush_periodically(self) -> None:
        """Runs until cancelled; the caller flushes once more after (``flush``)."""
        while True:
            await self._sleep(self.flush_interval_seconds)
            await to_thread.run_sync(self.flush)


def record_uses(connection: Connection, last_uses: Mapping[uuid.UUID, datetime]) -> None:
    """Moves each key's ``last_used_at`` forward to its last use, in one statement.

    A row whose ``last_used_at`` is already as late (another process wrote it) is not
    rewritten; a key that no longer exists is skipped.
    """
    if not last_uses:
        return
    # In key order: two processes writing overlapping keys lock the rows in the same order,
    # instead of deadlocking.
    key_ids = sorted(last_uses)
    uses = (
        func.unnest(
            bindparam("key_ids", key_ids, type_=ARRAY(UUID(as_uuid=True))),
            bindparam(
                "used_at",
                [last_uses[key_id] for key_id in key_ids],
                type_=ARRAY(TIMESTAMP(timezone=True)),
            ),
        )
        .table_valued(
            column("key_id", UUID(as_uuid=True)), column("used_at", TIMESTAMP(timezone=True))
        )
        .render_derived(name="uses")
    )
    connection.execute(
        update(api_keys)
        .where(
            api_keys.c.id == uses.c.key_id,
            or_(api_keys.c.last_used_at.is_(None), api_keys.c.last_used_at < uses.c.used_at),
        )
        .values(last_used_at=uses.c.used_at)
    )
