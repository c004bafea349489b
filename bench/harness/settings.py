"""The settings of one run, from the environment (what `make bench VAR=...` passes)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/13"
# Parts of every dealbase request a run may leave out (BENCH_WITHOUT), to measure each one's
# share under load: Redis (the rate limits kept in each process), the access lines (log level
# warning), the workers' raised young-generation threshold of the garbage collector (Python's
# 700 instead) and the route shortcuts (the route index and the direct call of a REST route). A
# run that leaves any out measures no target.
LEAVE_OUT = ("redis", "access-lines", "gc-threshold", "route-shortcuts")
# bench/custom_fields.py's table of customers a field is added to under writers: the target's
# (issue 57), and a quick look's (BENCH_SECONDS=3), which seeds in seconds rather than a minute.
TARGET_DDL_CUSTOMERS = 1_000_000
QUICK_DDL_CUSTOMERS = 100_000
QUICK_SECONDS = 3


class SettingsError(Exception):
    pass


def _int(name: str, default: int, low: int, high: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, not {text!r}") from None
    if not low <= value <= high:
        raise SettingsError(f"{name} must be from {low} to {high}, not {value}")
    return value


@dataclass(frozen=True)
class BenchSettings:
    """Every knob of a run; written into the results file as it was."""

    database_server: str
    redis_url: str
    seconds: int
    warmup_seconds: int
    connections: int
    threads: int
    workers: int
    timeout_seconds: int
    pool_size: int
    seed_deals: int
    seed_customers: int
    activities_per_customer: int
    scenarios: tuple[str, ...]
    profile_gil_only: bool
    # Times the wrk and pgbench scenarios are measured, each time all of them in order; the
    # figures the targets judge are medians over these rounds (harness/report.py).
    rounds: int = 1
    # bench/webhooks.py: events per throughput run (0: 500 per measured second) and commits a
    # second while the delay is measured (for `seconds`).
    webhook_events: int = 0
    webhook_rate: int = 50
    # bench/sync.py: customers of the nightly sync (batches), customers of the one-at-a-time
    # sample, operations per batch, and the clients sending at once (both modes).
    sync_customers: int = 100_000
    sync_single_customers: int = 10_000
    sync_batch: int = 1000
    sync_clients: int = 4
    # bench/live.py: `changes` subscriptions on one department, writes a second meanwhile (for
    # `seconds`), and whether the subscribers offer permessage-deflate (as browsers do).
    live_subscribers: int = 1000
    live_rate: int = 50
    live_deflate: bool = False
    # bench/custom_fields.py: the customers a list is filtered over, and those a field is added
    # to and removed from under writers (0: TARGET_DDL_CUSTOMERS, or QUICK_DDL_CUSTOMERS in a
    # quick run, `seconds` <= QUICK_SECONDS).
    custom_fields_customers: int = 100_000
    custom_fields_ddl_customers: int = 0
    without: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls) -> BenchSettings:
        scenarios = os.environ.get("BENCH_SCENARIOS", "").replace(",", " ").split()
        without = tuple(os.environ.get("BENCH_WITHOUT", "").replace(",", " ").split())
        unknown = sorted(set(without) - set(LEAVE_OUT))
        if unknown:
            raise SettingsError(f"BENCH_WITHOUT takes {', '.join(LEAVE_OUT)}, not {unknown}")
        return cls(
            database_server=os.environ.get("DEALBASE_BENCH_DATABASE_URL") or DEFAULT_SERVER,
            redis_url=os.environ.get("DEALBASE_BENCH_REDIS_URL") or DEFAULT_REDIS,
            seconds=_int("BENCH_SECONDS", 10, 1, 3600),
            warmup_seconds=_int("BENCH_WARMUP", 2, 0, 600),
            connections=_int("BENCH_CONNECTIONS", 32, 1, 1000),
            threads=_int("BENCH_THREADS", 2, 1, 64),
            workers=_int("BENCH_WORKERS", 2, 1, 64),
            timeout_seconds=_int("BENCH_TIMEOUT", 30, 1, 300),
            pool_size=_int("BENCH_POOL_SIZE", 10, 1, 200),
            seed_deals=_int("BENCH_SEED_DEALS", 60, 50, 100_000),
            seed_customers=_int("BENCH_SEED_CUSTOMERS", 1000, 200, 1_000_000),
            activities_per_customer=_int("BENCH_SEED_ACTIVITIES", 2, 1, 100),
            scenarios=tuple(scenarios),
            profile_gil_only=os.environ.get("BENCH_PROFILE_GIL", "1") != "0",
            rounds=_int("BENCH_ROUNDS", 1, 1, 20),
            webhook_events=_int("BENCH_WEBHOOK_EVENTS", 0, 0, 1_000_000),
            webhook_rate=_int("BENCH_WEBHOOK_RATE", 50, 1, 1000),
            sync_customers=_int("BENCH_SYNC_CUSTOMERS", 100_000, 10, 1_000_000),
            sync_single_customers=_int("BENCH_SYNC_SINGLE_CUSTOMERS", 10_000, 10, 1_000_000),
            sync_batch=_int("BENCH_SYNC_BATCH", 1000, 1, 10_000),
            sync_clients=_int("BENCH_SYNC_CLIENTS", 4, 1, 64),
            live_subscribers=_int("BENCH_LIVE_SUBSCRIBERS", 1000, 1, 10_000),
            live_rate=_int("BENCH_LIVE_RATE", 50, 1, 1000),
            live_deflate=os.environ.get("BENCH_LIVE_DEFLATE", "0") == "1",
            custom_fields_customers=_int("BENCH_CUSTOM_FIELDS_CUSTOMERS", 100_000, 100, 10_000_000),
            custom_fields_ddl_customers=_int(
                "BENCH_CUSTOM_FIELDS_DDL_CUSTOMERS", 0, 0, 100_000_000
            ),
            without=without,
        )

    @property
    def webhook_event_count(self) -> int:
        return self.webhook_events or 500 * self.seconds

    @property
    def sync_single_count(self) -> int:
        """The one-at-a-time sample: never more customers than the sync has."""
        return min(self.sync_single_customers, self.sync_customers)

    @property
    def custom_fields_ddl_count(self) -> int:
        """The customers a field is added to under writers: as set, else the target's count, or
        fewer in a quick run (its output says so)."""
        if self.custom_fields_ddl_customers:
            return self.custom_fields_ddl_customers
        return QUICK_DDL_CUSTOMERS if self.seconds <= QUICK_SECONDS else TARGET_DDL_CUSTOMERS

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["scenarios"] = list(self.scenarios)
        values["without"] = list(self.without)
        return values
