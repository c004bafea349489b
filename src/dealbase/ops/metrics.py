"""Process-local counters, exposed at GET /metrics in Prometheus's text format."""

from __future__ import annotations

import threading

from fastapi import FastAPI
from starlette.responses import PlainTextResponse


class Counter:
    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help_text = help_text
        self._value = 0
        self._lock = threading.Lock()

    def increment(self) -> None:
        with self._lock:
            self._value += 1

    @property
    def value(self) -> int:
        return self._value


class Metrics:
    def __init__(self) -> None:
        self.rate_limiter_faults = Counter(
            "dealbase_rate_limiter_faults_total",
            "Requests whose rate limits could not be checked (Redis unreachable or slow).",
        )

    def exposition(self) -> str:
        lines = []
        for counter in (self.rate_limiter_faults,):
            lines += [
                f"# HELP {counter.name} {counter.help_text}",
                f"# TYPE {counter.name} counter",
                f"{counter.name} {counter.value}",
            ]
        return "\n".join(lines) + "\n"


def install_metrics(app: FastAPI, metrics: Metrics) -> None:
    @app.get("/metrics", include_in_schema=False)
    def exposition() -> PlainTextResponse:
        return PlainTextResponse(metrics.exposition(), media_type="text/plain; version=0.0.4")
