"""Prometheus metrics (prometheus_client), one scrape for every worker of a server.

``dealbase serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at an empty folder before its workers
start (ops.metrics_files): each worker then keeps its values in files there, and a scrape,
served by any worker at ``GET /metrics`` or by the serving process on ``DEALBASE_METRICS_PORT``,
adds them up. A process without that variable (a test's app, uvicorn run by hand) reports its
own values.

The layers below report through callbacks of ``Metrics``, so none of them imports
prometheus_client.

Requests, units of work and key lookups are counted in plain numbers of the process and
written to prometheus_client's values once a second (``keep_up``), and before the process
answers a scrape: a value of the multiprocess files costs a lock, a check of the process id and
a write into the file, and a request made several of them. Counters take a sum;
the duration histogram takes one observation at a time (its only public way in), so each
request's duration is kept until then and observed then. A scrape may so miss up to a second
of another worker's requests, which the next scrape has.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Sequence

from fastapi import FastAPI
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.responses import Response

from dealbase.ops.metrics_files import MULTIPROCESS_DIR

# GraphQL operation names are the client's to choose: a process labels at most this many
# distinct ones, and counts the rest as "other", so a client cannot grow the series without end.
MAX_OPERATION_NAMES = 200
_OPERATION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# How often each worker writes the requests it counted, and records its pool's connections.
KEEP_UP_SECONDS = 1.0
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """One app's metrics, and the callbacks the request edge, the rate limits, authentication and
    GraphQL report to. Each app has a registry of its own (a test process builds many apps); in
    a served worker the values also go to the multiprocess files, which a scrape adds up."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._declare_request_metrics()
        self._declare_admission_metrics()
        self._declare_graphql_metrics()
        self._operation_names: set[str] = set()
        # Each (route, method, status)'s two series: ``labels`` checks and builds its key on
        # every call.
        self._answered: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._children: dict[tuple[Counter, tuple[str, ...]], Counter] = {}
        # The durations of the requests answered since the values were last written, by
        # (route, method, status).
        self._unwritten: dict[tuple[str, str, int], list[float]] = {}
        # Units of work started since then on a connection warm for their tenant, and cold.
        self._unwritten_warm = self._unwritten_cold = 0
        # Key lookups since then that the key cache answered, and that it did not.
        self._unwritten_hits = self._unwritten_misses = 0
        # What other parts count the same way, each written by its own writer with these.
        self._other_writers: list[Callable[[], None]] = []

    def _declare_request_metrics(self) -> None:
        """The requests, and the database work they do."""
        self._requests = Counter(
            "dealbase_http_requests",
            "HTTP requests answered, by route template (unmatched: no route), method, status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self._request_seconds = Histogram(
            "dealbase_http_request_duration_seconds",
            "Time from a request's arrival to its response's last byte, by route and method.",
            ["route", "method"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._pool_connections = Gauge(
            "dealbase_db_pool_connections",
            "Connections of the request pools, in use or idle, summed over live workers.",
            ["state"],
            multiprocess_mode="livesum",
            registry=self.registry,
        )
        self._pool_waiting = Gauge(
            "dealbase_db_pool_waiting_requests",
            "Requests waiting for a pooled connection, summed over live workers.",
            multiprocess_mode="livesum",
            registry=self.registry,
        )
        self._units_of_work = Counter(
            "dealbase_db_units_of_work",
            "Units of work on the request pools, by whether their connection had already worked"
            " in their tenant (warm: the tenant's catalog entries cached in its backend) or not.",
            ["connection"],
            registry=self.registry,
        )

    def _declare_admission_metrics(self) -> None:
        """The rate limits' refusals and faults, and the key cache's lookups."""
        self._rate_limit_refusals = Counter(
            "dealbase_rate_limit_refusals",
            "Requests refused 429 by a rate limit.",
            registry=self.registry,
        )
        self._auth_failure_refusals = Counter(
            "dealbase_auth_failure_refusals",
            "Requests refused 429 before authentication: their client address failed it too often.",
            registry=self.registry,
        )
        self._rate_limiter_faults = Counter(
            "dealbase_rate_limiter_faults",
            "Requests whose rate limits could not be checked (Redis unreachable or slow).",
            registry=self.registry,
        )
        self._key_lookups = Counter(
            "dealbase_key_cache_lookups",
            "API key lookups, by whether the process's key cache answered (hit) or not (miss).",
            ["result"],
            registry=self.registry,
        )

    def _declare_graphql_metrics(self) -> None:
        self._graphql_operations = Counter(
            "dealbase_graphql_operations",
            "GraphQL operations run, by operation name (anonymous, other) and type.",
            ["operation", "type"],
            registry=self.registry,
        )
        self._graphql_errors = Counter(
            "dealbase_graphql_errors",
            "Errors in GraphQL responses, by extensions.code.",
            ["code"],
            registry=self.registry,
        )
        self._graphql_root_fields = Counter(
            "dealbase_graphql_root_fields",
            "Query root fields run, by field and path: compiled (one SQL statement building the"
            " JSON) or resolvers.",
            ["field", "path"],
            registry=self.registry,
        )

    def request_answered(self, route: str, method: str, status: int, seconds: float) -> None:
        durations = self._unwritten.get((route, method, status))
        if durations is None:
            self._unwritten[(route, method, status)] = [seconds]
        else:
            durations.append(seconds)

    def write_also(self, writer: Callable[[], None]) -> None:
        """Calls ``writer`` whenever the values counted here are written: it writes what its
        part counted meanwhile."""
        self._other_writers.append(writer)

    def write_counted(self) -> None:
        """Writes the requests, units of work and key lookups counted since the last time to
        their series, and has the other writers write theirs."""
        for writer in self._other_writers:
            writer()
        if self._unwritten_hits:
            self._child(self._key_lookups, "hit").inc(self._unwritten_hits)
            self._unwritten_hits = 0
        if self._unwritten_misses:
            self._child(self._key_lookups, "miss").inc(self._unwritten_misses)
            self._unwritten_misses = 0
        if self._unwritten_warm:
            self._child(self._units_of_work, "warm").inc(self._unwritten_warm)
            self._unwritten_warm = 0
        if self._unwritten_cold:
            self._child(self._units_of_work, "cold").inc(self._unwritten_cold)
            self._unwritten_cold = 0
        unwritten, self._unwritten = self._unwritten, {}
        for key, durations in unwritten.items():
            series = self._answered.get(key)
            if series is None:
                route, method, status = key
                series = self._answered[key] = (
                    self._requests.labels(route, method, str(status)),
                    self._request_seconds.labels(route, method),
                )
            count, histogram = series
            count.inc(len(durations))
            for seconds in durations:
                histogram.observe(seconds)

    def unit_of_work_started(self, warm: bool) -> None:
        if warm:
            self._unwritten_warm += 1
        else:
            self._unwritten_cold += 1

    def rate_limit_refused(self) -> None:
        self._rate_limit_refusals.inc()

    def auth_failure_refused(self) -> None:
        self._auth_failure_refusals.inc()

    def rate_limiter_fault(self) -> None:
        self._rate_limiter_faults.inc()

    def key_looked_up(self, cached: bool) -> None:
        if cached:
            self._unwritten_hits += 1
        else:
            self._unwritten_misses += 1

    def graphql_operation(self, name: str | None, kind: str, error_codes: Sequence[str]) -> None:
        self._child(self._graphql_operations, self._operation_label(name), kind).inc()
        for code in error_codes:
            self._child(self._graphql_errors, code).inc()

    def graphql_root_field(self, field: str, path: str) -> None:
        # Field names are the schema's: a bounded label.
        self._child(self._graphql_root_fields, field, path).inc()

    def _child(self, metric: Counter, *values: str) -> Counter:
        """``metric.labels(*values)``, kept: ``labels`` checks and builds its key on every call.
        Every label value here is bounded (operation names by MAX_OPERATION_NAMES)."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def _operation_label(self, name: str | None) -> str:
        if not name:
            return "anonymous"
        if name in self._operation_names:
            return name
        if _OPERATION_NAME.fullmatch(name) and len(self._operation_names) < MAX_OPERATION_NAMES:
            self._operation_names.add(name)
            return name
        return "other"

    def record_pool(self, usage: tuple[int, int, int]) -> None:
        """``usage``: connections in use, idle, and requests waiting."""
        in_use, idle, waiting = usage
        self._pool_connections.labels("in_use").set(in_use)
        self._pool_connections.labels("idle").set(idle)
        self._pool_waiting.set(waiting)

    async def keep_up(self, pool_usage: Callable[[], tuple[int, int, int]]) -> None:
        """Every second until cancelled, writes the requests counted meanwhile and records the
        pool's usage; writes the last ones when cancelled (the worker stops)."""
        try:
            while True:
                self.write_counted()
                self.record_pool(pool_usage())
                await asyncio.sleep(KEEP_UP_SECONDS)
        finally:
            self.write_counted()

    def exposition(self) -> bytes:
        self.write_counted()
        return generate_latest(multiprocess_registry() or self.registry)


def multiprocess_registry() -> CollectorRegistry | None:
    """The registry that adds up every worker's files, when this process serves workers."""
    if not os.environ.get(MULTIPROCESS_DIR):
        return None
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


def worker_stopped(pid: int) -> None:
    """Drops a stopped worker's live gauges from the sums."""
    if os.environ.get(MULTIPROCESS_DIR):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def install_metrics(app: FastAPI, metrics: Metrics) -> None:
    @app.get("/metrics", include_in_schema=False)
    def exposition() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
