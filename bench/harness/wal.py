"""The write-ahead log a measured load made, per request: its records, full-page images and
bytes, from ``pg_stat_wal`` before and after the load.

A commit waits for its WAL to be written and flushed, and every byte of it is copied, checksummed
and written by a backend: what a write costs PostgreSQL grows with it. ``pg_stat_wal`` counts the
whole cluster's WAL, so other work on the same cluster meanwhile is counted too (the bench runs
its loads one at a time).
"""

from __future__ import annotations

from types import TracebackType

import psycopg

_READ = "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal"
FIGURES = ("records", "fpi", "bytes")


class WalWritten:
    """While entered, how much WAL the cluster of ``database`` wrote; ``per_request`` says it a
    request."""

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

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
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
        return {name: count / requests for name, count in self.written.items()}
