"""The parts of `make bench` measured after the wrk scenarios (bench/run.py), each on a scratch
database of its own, with a table of its own: bench/webhooks.py, sync.py, live.py and
custom_fields.py, each imported when it runs (webhooks.py and custom_fields.py import dealbase
itself, which the wrk scenarios do not need)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.console import sayer
from harness.paths import RESULTS
from harness.processes import ServiceFailed
from harness.profiling import ProfileFailed
from harness.scenarios import CUSTOM_FIELDS, LIVE, SYNC, WEBHOOKS
from harness.settings import BenchSettings

say = sayer("bench")


@dataclass(frozen=True)
class Part:
    """A part of `make bench` with a table of its own, measured after the wrk scenarios on a
    scratch database of its own: its name (its key in the results file, and in BENCH_SCENARIOS),
    what measures it (its report, or why there is none) and what prints its report's tables."""

    name: str
    measure: Callable[[BenchSettings, str], tuple[Any, str | None]]
    tables: Callable[[Any], str]


def webhook_tables(report: Any) -> str:
    import webhooks

    text: str = webhooks.tables(report)
    return text


def sync_tables(report: Any) -> str:
    import sync

    text: str = sync.tables(report)
    return text


def live_tables(report: Any) -> str:
    import live

    text: str = live.tables(report)
    return text


def _live(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/live.py's measurements, on a scratch database of their own; the report, or why
    there is none."""
    import live

    say(
        f"live: {settings.live_subscribers:,} subscribers on one department,"
        f" {settings.live_rate} writes/s for {settings.seconds} s (bench/live.py)"
    )
    try:
        return live.measure(live.Options(settings, RESULTS / f"{stamp}-logs", stamp)), None
    except (ServiceFailed, ProfileFailed) as exc:
        return None, str(exc)
    except Exception:
        traceback.print_exc()
        return None, "an unexpected error (above)"


def _sync(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/sync.py's measurements, on a scratch database of their own; the report, or why
    there is none."""
    import sync

    say(
        f"sync: {settings.sync_customers:,} customers in batches of {settings.sync_batch},"
        f" {settings.sync_single_count:,} one at a time, {settings.sync_clients} clients"
        " (bench/sync.py)"
    )
    try:
        return sync.measure(sync.Options(settings, RESULTS / f"{stamp}-logs")), None
    except ServiceFailed as exc:
        return None, str(exc)
    except Exception as exc:
        traceback.print_exc()
        return None, f"{type(exc).__name__}: {exc}"


def _deliver_webhooks(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/webhooks.py's measurements, on a scratch database of their own; the report, or
    why there is none."""
    import webhooks  # imports dealbase itself, which the wrk scenarios do not need

    events = settings.webhook_event_count
    say(
        f"webhooks: {events} events per throughput run; {settings.webhook_rate} commits/s for"
        f" {settings.seconds} s for the delay (bench/webhooks.py)"
    )
    options = webhooks.Options(
        server=settings.database_server,
        events=events,
        rate=settings.webhook_rate,
        delay_seconds=settings.seconds,
        logs=RESULTS / f"{stamp}-logs",
        stamp=stamp,
    )
    try:
        return webhooks.measure(options), None
    except (ServiceFailed, ProfileFailed) as exc:
        return None, str(exc)
    except Exception as exc:
        traceback.print_exc()
        return None, f"{type(exc).__name__}: {exc}"


def custom_field_tables(report: Any) -> str:
    import custom_fields

    text: str = custom_fields.tables(report)
    return text


def _custom_fields(settings: BenchSettings, stamp: str) -> tuple[Any, str | None]:
    """bench/custom_fields.py's measurements, on a scratch database of their own; the report, or
    why there is none."""
    import custom_fields  # imports dealbase itself, through bench/custom_field_ddl.py

    say(
        "custom_fields: POST /customers with 20 custom fields, a list filtered on one over"
        f" {settings.custom_fields_customers:,} customers, a field added and removed on"
        f" {settings.custom_fields_ddl_count:,} customers (bench/custom_fields.py)"
    )
    try:
        return custom_fields.measure(
            custom_fields.Options(settings, RESULTS / f"{stamp}-logs")
        ), None
    except ServiceFailed as exc:
        return None, str(exc)
    except Exception as exc:
        traceback.print_exc()
        return None, f"{type(exc).__name__}: {exc}"


# In the order they run, after the wrk scenarios.
PARTS = (
    Part(WEBHOOKS, _deliver_webhooks, webhook_tables),
    Part(SYNC, _sync, sync_tables),
    Part(LIVE, _live, live_tables),
    Part(CUSTOM_FIELDS, _custom_fields, custom_field_tables),
)
