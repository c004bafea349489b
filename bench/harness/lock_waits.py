"""How much of a load's time PostgreSQL's backends spend waiting on a lock, sampled from
pg_stat_activity while the load runs."""

from __future__ import annotations

import threading
from collections import Counter

import psycopg

# Ten looks a second: a 10 s run gives a hundred samples of every backend.
INTERVAL_SECONDS = 0.1

_SAMPLE = """
SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, ''), count(*)
FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND backend_type = 'client backend'
  AND pid <> pg_backend_pid()
GROUP BY 1, 2
"""


class LockWaits:
    """Samples the active client backends of ``database`` every INTERVAL_SECONDS while entered;
    ``share`` is then the part of those backend samples that waited on a heavyweight lock (a
    row's, another transaction's: ``wait_event_type = 'Lock'``)."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.active = 0
        self.waiting = 0
        # Backend samples by what they were doing ("Lock:transactionid", "Client:ClientRead",
        # "CPU" for running): which lock, when they wait on one.
        self.by_event: Counter[str] = Counter()
        self.error: str | None = None

    def __enter__(self) -> LockWaits:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def share(self) -> float | None:
        return self.waiting / self.active if self.active else None

    def _sample(self) -> None:
        try:
            with psycopg.connect(self._database, autocommit=True) as connection:
                while not self._stop.wait(INTERVAL_SECONDS):
                    for kind, event, count in connection.execute(_SAMPLE):
                        self.active += count
                        self.waiting += count if kind == "Lock" else 0
                        self.by_event[f"{kind}:{event}" if event else kind] += count
        except psycopg.Error as exc:
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
