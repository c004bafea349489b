"""A scenario's load measured: a warm-up, then the measured run, with what it cost each party
and the locks it waited on; and the database settled before it. `make bench`'s wrk and pgbench
scenarios (bench/run.py) and bench/custom_fields.py's loads are measured alike."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psycopg

from harness.console import sayer
from harness.cpu import CpuUse
from harness.load import LoadFailed, Measurement
from harness.lock_waits import LockWaits
from harness.report import Outcome
from harness.scenarios import Scenario
from harness.settings import BenchSettings
from harness.stack import analyze
from harness.tools import load_average
from harness.wal import WalWritten

say = sayer("bench")

# A slow server on a busy machine: a run lasts long enough for each connection to complete about
# ROUNDS requests (from the warm-up's p50), up to MAX_SECONDS; a warm-up in which not every
# connection got an answer is run again, longer, up to MAX_WARMUP seconds.
ROUNDS = 10
MAX_SECONDS = 60
MAX_WARMUP = 32


def _warm_up(
    scenario: Scenario, run: Callable[[int], Measurement], settings: BenchSettings, outcome: Outcome
) -> int | None:
    """The warm-up: the seconds the measured run then lasts, or None when it failed (the
    outcome then says why)."""
    seconds = settings.seconds
    if not settings.warmup_seconds:
        return seconds
    warmup = settings.warmup_seconds
    warm = run(warmup)
    while not warm.errors and warm.requests < settings.connections and warmup < MAX_WARMUP:
        warmup = min(warmup * 4, MAX_WARMUP)
        say(f"{scenario.name}: slow answers, warming up again for {warmup} s")
        warm = run(warmup)
    outcome.extra["warmup_seconds"] = warmup
    if warm.errors:
        outcome.measurement = warm
        outcome.failure = f"{warm.errors} errors in the warm-up: {warm.error_detail}"
        return None
    if warm.requests:
        stretched = math.ceil(ROUNDS * warm.p50_ms / 1000)
        seconds = max(seconds, min(MAX_SECONDS, stretched))
    return seconds


def _observed(
    run: Callable[[int], Measurement],
    seconds: int,
    outcome: Outcome,
    database: str,
    server_pid: int | None,
) -> None:
    """The measured run, with its lock waits, CPU and WAL in ``outcome.extra``."""
    with (
        LockWaits(database) as waits,
        CpuUse(server_pid, database) as cpu,
        WalWritten(database) as wal,
    ):
        outcome.measurement = run(seconds)
    requests = outcome.measurement.requests
    outcome.extra["cpu_us_per_request"] = cpu.per_request(requests)
    outcome.extra["run_queue_wait_us_per_request"] = cpu.waited_per_request(requests)
    outcome.extra["wal_per_request"] = wal.per_request(requests)
    outcome.extra["checkpoints"] = wal.checkpoints()
    outcome.extra["lock_waits"] = {
        "share": waits.share,
        "backend_samples": waits.active,
        "waiting": waits.waiting,
        "by_event": dict(waits.by_event.most_common()),
        "error": waits.error,
    }


def measure(
    scenario: Scenario,
    run: Callable[[int], Measurement],
    settings: BenchSettings,
    during: Callable[[], Any] | None = None,
    database: str | None = None,
    server_pid: int | None = None,
) -> Outcome:
    """A warm-up, then the measured run; any error fails the scenario. With ``database``, the
    measured run's lock waits there are sampled (harness/lock_waits.py), and the CPU it cost
    the server (``server_pid`` and its children), that database's backends, Redis and the load
    tool (harness/cpu.py), and the WAL it wrote and the checkpoints meanwhile (harness/wal.py)."""
    outcome = Outcome(scenario, load_average_before=load_average())
    try:
        seconds = _warm_up(scenario, run, settings, outcome)
        if seconds is None:
            return outcome
        if during is not None:
            during()
        if database is None:
            outcome.measurement = run(seconds)
        else:
            _observed(run, seconds, outcome, database, server_pid)
    except LoadFailed as exc:
        outcome.failure = str(exc)
        return outcome
    finally:
        outcome.load_average_after = load_average()
    m = outcome.measurement
    assert m is not None
    if m.errors:
        outcome.failure = f"{m.errors} errors: {m.error_detail}"
    elif m.requests == 0:
        outcome.failure = f"no request completed in {seconds} s (each took longer)"
    return outcome


def report_line(outcome: Outcome) -> None:
    m = outcome.measurement
    if outcome.ok and m:
        say(
            f"{outcome.scenario.name}: {m.requests_per_second:,.0f} req/s, p50 {m.p50_ms:.1f} ms,"
            f" p99 {m.p99_ms:.1f} ms, {m.requests} requests, 0 errors"
        )
        return
    print(f"\nbench: FAILED {outcome.scenario.name}: {outcome.failure}", file=sys.stderr)
    if m and m.first_error:
        print(f"  first bad response: {m.first_error}", file=sys.stderr)
    print("", file=sys.stderr, flush=True)


def settle_database(database_url: str, schema: str) -> None:
    """ANALYZE the tenant's tables before each scenario, as autovacuum keeps a database analysed,
    then CHECKPOINT, so that no load pays for the WAL the loads before it wrote.

    The machines this runs on have autovacuum off, so without it the planner would plan the
    reads on the statistics of the seed, before the write scenarios added thousands of rows: a
    page of 50 deals then joined a full scan of the customers where, with current statistics, it
    looks up its own, whichever server asked.

    The write scenarios fill ``max_wal_size`` within a run, so a checkpoint began in some loads
    and not in the load beside them, and a round with one at work read lower than a round
    without (commit 254de27). After its own CHECKPOINT a load of 12 s meets none (the next is
    due 5 minutes later, or a gigabyte on), and each pays the full-page images of the pages it
    changes first, as every load does after a checkpoint in production. A role that may not
    CHECKPOINT (neither superuser nor ``pg_checkpoint``) runs the loads without; the table's
    checkpoint column shows where one began.
    """
    analyze(database_url, schema)
    with (
        psycopg.connect(database_url, autocommit=True) as connection,
        suppress(psycopg.errors.InsufficientPrivilege),
    ):
        connection.execute("CHECKPOINT")
