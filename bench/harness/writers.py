"""Clients creating customers one after another while something happens to the cluster (a
tenant moved, tenants rebalanced), every answer kept, and the writes a second and latency of a
window of time: what the writers saw before, during and after it."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
from psycopg import sql

from harness.figures import ms, percentile
from harness.stack import REST_PREFIX

WRITERS = 4


@dataclass(frozen=True)
class WriterTenant:
    """A tenant's department a writer creates customers in, with its key."""

    schema: str
    api_key: str
    department_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Api-Key": self.api_key, "X-Department-Id": self.department_id}


@dataclass(frozen=True)
class Answer:
    writer: int
    sequence: int
    schema: str
    started: float
    ended: float
    status: int
    customer_id: str | None
    retry_after: str | None
    text: str


class Writers:
    """One thread a writer, each creating customers one after another until stopped, going
    round its own tenants; every answer kept. A customer's last name is ``<label>-w<writer>-
    <sequence>``, so what arrives elsewhere (a webhook) tells its writer and order."""

    def __init__(self, base_url: str, tenants: list[list[WriterTenant]], label: str) -> None:
        self.base_url = base_url
        self.tenants = tenants
        self.label = label
        self.stop = threading.Event()
        self.answers: list[Answer] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._write, args=(n,), daemon=True)
            for n in range(len(tenants))
        ]

    def _write(self, writer: int) -> None:
        own = self.tenants[writer]
        with httpx.Client(base_url=self.base_url, timeout=120) as client:
            sequence = 0
            while not self.stop.is_set():
                tenant = own[sequence % len(own)]
                sequence += 1
                started = time.monotonic()
                try:
                    response = client.post(
                        f"{REST_PREFIX}/customers",
                        json={"last_name": f"{self.label}-w{writer}-{sequence:07d}"},
                        headers=tenant.headers,
                    )
                except httpx.HTTPError as exc:
                    status, customer_id, retry_after, text = 0, None, None, repr(exc)
                else:
                    status = response.status_code
                    customer_id = response.json()["id"] if status == 201 else None
                    retry_after = response.headers.get("retry-after")
                    text = "" if status == 201 else response.text[:300]
                answer = Answer(
                    writer,
                    sequence,
                    tenant.schema,
                    started,
                    time.monotonic(),
                    status,
                    customer_id,
                    retry_after,
                    text,
                )
                with self.lock:
                    self.answers.append(answer)

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=150)


def checked(
    answers: list[Answer], url: str, label: str
) -> tuple[dict[str, Any], list[str], set[tuple[str, str]]]:
    """What the writers' answers must be, against the database at ``url``: each a 201, or a 503
    with Retry-After; every 201's customer in its tenant's table, and no row of ``label``'s
    writers without one. The figures, the failures, and the (schema, id) answered 201."""
    failures: list[str] = []
    statuses = Counter(a.status for a in answers)
    refused = [a for a in answers if a.status == 503 and a.retry_after]
    unexpected = [a for a in answers if a.status != 201 and a not in refused]
    if unexpected:
        failures.append(
            f"{len(unexpected)} answers neither 201 nor 503 with Retry-After, the first:"
            f" {unexpected[0].status} {unexpected[0].text}"
        )
    answered = {(a.schema, a.customer_id) for a in answers if a.customer_id}
    stored: set[tuple[str, str]] = set()
    with psycopg.connect(url) as connection:
        for schema in sorted({a.schema for a in answers}):
            query = sql.SQL("SELECT id::text FROM {} WHERE last_name LIKE {}").format(
                sql.Identifier(schema, "customers"), sql.Literal(f"{label}-%")
            )
            stored |= {(schema, row[0]) for row in connection.execute(query)}
    if answered - stored:
        failures.append(f"{len(answered - stored)} rows answered 201 are not in the table")
    figures = {
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "refused_503_with_retry_after": len(refused),
        "unexpected_answers": len(unexpected),
        "rows_answered_201": len(answered),
        "rows_lost": len(answered - stored),
        "rows_without_a_201": len(stored - answered),
    }
    return figures, failures, answered


def window(answers: list[Answer], start: float, end: float) -> dict[str, Any]:
    """The answers that arrived from ``start`` to ``end``: how many, the customers created a
    second, and their latency."""
    inside = [a for a in answers if start <= a.ended < end]
    latencies = sorted(ms(a.ended - a.started) for a in inside)
    seconds = end - start
    created = sum(a.status == 201 for a in inside)
    figures: dict[str, Any] = {
        "seconds": round(seconds, 2),
        "answers": len(inside),
        "created": created,
        "writes_per_second": round(created / seconds, 1) if seconds > 0 else None,
    }
    if latencies:
        figures.update(
            p50_ms=latencies[len(latencies) // 2],
            p99_ms=percentile(latencies, 0.99),
            max_ms=latencies[-1],
        )
    return figures
