"""What ``/proc`` says of a process: its CPU seconds, its parent, the processes under it, and
the machine's busy time. For the CPU a party costs a measured load, where a script reads it
between two moments rather than sampling it as ``cpu.CpuUse`` does."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the process's name, from its state (proc(5)'s
    third field) on; None once the process is gone. The name is in parentheses and may hold
    spaces, so the fields follow its last ')'."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU of a process (all its threads) so far; None if it is gone or hidden."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def parent_pid(pid: int) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (parent := parent_pid(int(entry.name))) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    return children


def process_tree(root: int) -> list[int]:
    """``root`` and every process under it, to any depth (a server's workers, a PostgreSQL
    server's backends)."""
    children = _children()
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, ()))
    return tree


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every process under it, with what each has of its children
    that ended (which it waited for): a PostgreSQL server's backends come and go."""
    total = 0.0
    for pid in process_tree(root):
        fields = stat_fields(pid)
        if fields is not None:
            total += sum(int(value) for value in fields[11:15]) / CLOCK_TICKS
    return total


def machine_busy_seconds() -> float:
    """CPU seconds every core spent not idle, since boot."""
    values = [int(v) for v in (_PROC / "stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLOCK_TICKS
