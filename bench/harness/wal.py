"""The write-ahead log a measured load made, per request: its records, full-page images and
bytes, from ``pg_stat_wal`` before and after the load; and the checkpointer's work meanwhile,
from ``pg_stat_bgwriter``.

A commit waits for its WAL to be written and flushed, and every byte of it is copied, checksummed
and written by a backend: what a write costs PostgreSQL grows with it. A checkpoint writes the
dirty buffers to disk and fsyncs them while the load runs, and the pages first changed after it
begin their WAL with a full-page image: its writes compete with the commits' flushes, and
a load a checkpoint overlaps can have a longer tail than the same load without one. Both views
count the whole cluster, so other work on the same cluster meanwhile is counted too (the bench
runs its loads one at a time).
"""

from __future__ import annotations

import psycopg

_READ = (
    "SELECT wal_records, wal_fpi, wal_bytes, checkpoints_timed + checkpoints_req,"
    " buffers_checkpoint FROM pg_stat_wal, pg_stat_bgwriter"
)
FIGURES = ("records", "fpi", "bytes", "checkpoints_started", "checkpoint_buffers_written")
_PER_REQUEST = FIGURES[:3]


class WalWritten:
    """While entered, how much WAL the cluster of ``database`` wrote and what its checkpointer
    did; ``per_request`` says the WAL a request, ``checkpoints`` the checkpointer's counts."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._before: tuple[int, ...] = ()
        self.written: dict[str, int] = {}
        self.error: str | None = None

    def _read(self) -> tuple[int, ...]:
        with psycopg.connect(self._database, autocommit=True) as connection:
            row = connection.execute(_READ).fetchone()
        assert row is not None
        return tuple(int(value) for value in row)

    def __enter__(self) -> WalWritten:
        try:
            self._before = self._read()
        except psycopg.Error as exc:
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return self

    def __exit__(self, *_: object) -> None:
        if not self._before:
            return
        try:
            after = self._read()
        except psycopg.Error as exc:
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return
        self.written = {
            name: end - start for name, start, end in zip(FIGURES, self._before, after, strict=True)
        }

    def per_request(self, requests: int) -> dict[str, float]:
        if not requests or not self.written:
            return {}
        return {name: self.written[name] / requests for name in _PER_REQUEST}

    def checkpoints(self) -> dict[str, int]:
        """Checkpoints begun during the load, and the buffers checkpoints wrote meanwhile
        (a checkpoint begun before the load and still writing counts there)."""
        return {name: self.written[name] for name in FIGURES[3:] if name in self.written}
