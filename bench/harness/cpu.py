"""The CPU a measured load costs each party, per request: the server under test, PostgreSQL's
backends serving the bench's database, Redis, and the load tool itself.

Requests a second move between two runs of one commit on a shared machine; CPU a request moves
far less, since it does not depend on who else ran meanwhile. It also says where
a difference between dealbase and its baseline lies (in the server's Python, in PostgreSQL, in
Redis), which a ratio of requests a second cannot.

Read from ``/proc/<pid>/stat`` (utime + stime of every thread of a process, in clock ticks of
10 ms), sampled every ``INTERVAL_SECONDS`` while the load runs, so that a process that ends
during the load (a pgbench connection's backend) keeps what it used until its last sample.
What a load tool used comes from ``getrusage(RUSAGE_CHILDREN)``: wrk and pgbench are children
of the bench, and are waited for before the load's end.

Beside it, how long each party's processes waited to run while they could (``/proc/<pid>/
schedstat``'s second figure, in nanoseconds, of each process's main thread: a server worker's
event loop, a PostgreSQL backend): on two cores shared by the load tool, the server's workers
and PostgreSQL's backends, a request whose answer is ready can wait for a core, and that wait
shows in its latency and in no CPU figure.
"""

from __future__ import annotations

import os
import resource
import threading
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

INTERVAL_SECONDS = 0.2
_TICK_SECONDS = 1 / os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


@dataclass(frozen=True)
class _Process:
    pid: int
    parent: int
    name: str
    ticks: int


def _processes() -> list[_Process]:
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # The name is in parentheses and may hold spaces: the fields follow its last ')'.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # Fields 4 (ppid), 14 (utime) and 15 (stime) of proc(5), counted from the state (3).
        found.append(
            _Process(int(entry.name), int(fields[1]), name, int(fields[11]) + int(fields[12]))
        )
    return found


def _run_queue_wait(pid: int) -> int | None:
    """Nanoseconds the process's main thread has waited on a run queue, or None (ended, or a
    kernel without schedstats)."""
    try:
        return int((_PROC / str(pid) / "schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _command_line(pid: int) -> str:
    try:
        return (
            (_PROC / str(pid) / "cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode(errors="replace")
        )
    except OSError:
        return ""


class CpuUse:
    """While entered, the CPU seconds of the process tree under ``server_pid``, of the
    PostgreSQL backends whose title names the database of the URL ``database`` (``postgres:
    user database ...``), of
    every ``redis-server``, and of the children this process waits for (the load tool).

    Redis is the machine's: other work that uses it meanwhile is counted too."""

    def __init__(self, server_pid: int | None, database: str) -> None:
        self._waits_first: dict[tuple[str, int], int] = {}
        self._waits_last: dict[tuple[str, int], int] = {}
        self.waited_seconds: dict[str, float] = {}
        self._server_pid = server_pid
        self._backend_title = f" {conninfo_to_dict(database)['dbname']} "
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._first: dict[tuple[str, int], int] = {}
        self._last: dict[tuple[str, int], int] = {}
        self._titles: dict[int, bool] = {}
        self._children_before = 0.0
        self.seconds: dict[str, float] = {}

    def __enter__(self) -> CpuUse:
        self._children_before = self._children_seconds()
        self._look(first=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._look(first=False)
        used: dict[str, float] = {"server": 0.0, "postgres": 0.0, "redis": 0.0}
        for (party, pid), ticks in self._last.items():
            used[party] += (ticks - self._first.get((party, pid), 0)) * _TICK_SECONDS
        used["load"] = self._children_seconds() - self._children_before
        self.seconds = used
        waited: dict[str, float] = {"server": 0.0, "postgres": 0.0}
        for (party, pid), nanoseconds in self._waits_last.items():
            if party in waited:
                waited[party] += (nanoseconds - self._waits_first.get((party, pid), 0)) / 1e9
        self.waited_seconds = waited

    def per_request(self, requests: int) -> dict[str, float]:
        """Microseconds a request, by party."""
        if not requests or not self.seconds:
            return {}
        return {party: seconds * 1e6 / requests for party, seconds in self.seconds.items()}

    def waited_per_request(self, requests: int) -> dict[str, float]:
        """Microseconds a request that the server's and PostgreSQL's processes waited for a
        core."""
        if not requests or not self.waited_seconds:
            return {}
        return {party: seconds * 1e6 / requests for party, seconds in self.waited_seconds.items()}

    @staticmethod
    def _children_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def _sample(self) -> None:
        while not self._stop.wait(INTERVAL_SECONDS):
            self._look(first=False)

    def _look(self, *, first: bool) -> None:
        processes = _processes()
        children: dict[int, list[int]] = {}
        for process in processes:
            children.setdefault(process.parent, []).append(process.pid)
        in_server: set[int] = set()
        pending = [self._server_pid] if self._server_pid is not None else []
        while pending:
            pid = pending.pop()
            in_server.add(pid)
            pending.extend(children.get(pid, ()))
        for process in processes:
            party = self._party(process, in_server)
            if party is None:
                continue
            key = (party, process.pid)
            if first:
                self._first[key] = process.ticks
            self._last[key] = max(self._last.get(key, 0), process.ticks)
            if party in ("server", "postgres"):
                waited = _run_queue_wait(process.pid)
                if waited is not None:
                    if first:
                        self._waits_first[key] = waited
                    self._waits_last[key] = max(self._waits_last.get(key, 0), waited)

    def _party(self, process: _Process, in_server: set[int]) -> str | None:
        if process.pid in in_server:
            return "server"
        if process.name == "redis-server":
            return "redis"
        if process.name == "postgres":
            named = self._titles.get(process.pid)
            if named is None:
                named = self._titles[process.pid] = self._backend_title in _command_line(
                    process.pid
                )
            return "postgres" if named else None
        return None
