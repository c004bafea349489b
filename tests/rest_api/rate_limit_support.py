"""Helpers for the rate-limit tests over HTTP: apps with limits of their own, the RateLimit
headers read as the IETF draft writes them, counters at GET /metrics, and requests sent all at
once."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from dealbase.app import create_app
from dealbase.config import Settings
from tests.redis_support import RedisServer
from tests.support import FakeClock

API = "/api/v1/integration"
CUSTOMERS = f"{API}/customers"
PROBLEM = "application/problem+json"
FAULTS = re.compile(r"^dealbase_rate_limiter_faults_total (\d+)(?:\.0)?$", re.MULTILINE)
T = TypeVar("T")
# How long the apps of the rate-limit tests wait for Redis's answer, unless a test sets its own
# (one whose subject is the timeout): a bound for failing, not a margin to pass. A check given up
# fails open, and would let one more request through than the test counts.
PATIENT_TIMEOUT_MS = 10_000


# One request every 5 s: nothing refills while a test runs, so every count is exact.
SLOW = "0.2/s"


def slow_limits(key_burst: int, tenant_burst: int) -> dict[str, Any]:
    """The key's and the tenant's limits at one request in 5 s, with these bursts."""
    return {
        "rate_limit_key": SLOW,
        "rate_limit_key_burst": key_burst,
        "rate_limit_tenant": SLOW,
        "rate_limit_tenant_burst": tenant_burst,
    }


def patient(update: dict[str, Any]) -> dict[str, Any]:
    """``update`` with the patient Redis timeout, unless it sets one."""
    return {"redis_timeout_ms": PATIENT_TIMEOUT_MS, **update}


@contextmanager
def serving(
    settings: Settings, *, clock: Callable[[], float] = time.monotonic, **update: Any
) -> Iterator[TestClient]:
    """A started app (its key-change listener running) with these settings changed (a patient
    Redis timeout unless they say otherwise), its in-process rate limits on ``clock``."""
    app = create_app(settings.model_copy(update=patient(update)), clock=clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@dataclass(frozen=True)
class Limiter:
    """Where the app of a rate-limit test keeps its buckets, and how the test lets time pass."""

    redis_url: str | None  # None: in the process
    clock: Callable[[], float]  # the app's clock (create_app's): the test's own in the process

    @property
    def app_options(self) -> dict[str, Any]:
        """What ``serving`` (and the helpers that pass to it) takes to keep the buckets here."""
        return {"redis_url": self.redis_url, "clock": self.clock}

    def wait(self, seconds: float) -> None:
        if isinstance(self.clock, FakeClock):
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)


@dataclass(frozen=True)
class Policy:
    quota: int
    window: int


@dataclass(frozen=True)
class State:
    policy: str
    remaining: int
    reset: int


def _items(value: str) -> list[tuple[str, dict[str, str]]]:
    """A structured-field list of quoted-string items with parameters: '"a";q=1;w=2, "b";...'."""
    items = []
    for item in value.split(","):
        name, *parameters = (part.strip() for part in item.split(";"))
        assert re.fullmatch(r'"[a-z]+"', name), value
        pairs = dict(parameter.split("=", 1) for parameter in parameters)
        assert all(re.fullmatch(r"\d+", v) for v in pairs.values()), value
        items.append((name.strip('"'), pairs))
    return items


def policies(response: httpx.Response) -> dict[str, Policy]:
    """``RateLimit-Policy``: every limit's quota (q) and window in seconds (w)."""
    header = response.headers.get("RateLimit-Policy")
    assert header is not None, f"no RateLimit-Policy on {response.status_code}: {response.headers}"
    found = {}
    for name, parameters in _items(header):
        assert set(parameters) == {"q", "w"}, header
        found[name] = Policy(int(parameters["q"]), int(parameters["w"]))
    return found


def state(response: httpx.Response) -> State:
    """``RateLimit``: the limit closest to running out, requests left (r), seconds to full (t)."""
    header = response.headers.get("RateLimit")
    assert header is not None, f"no RateLimit on {response.status_code}: {response.headers}"
    ((name, parameters),) = _items(header)
    assert set(parameters) == {"r", "t"}, header
    return State(name, int(parameters["r"]), int(parameters["t"]))


def has_rate_limit_headers(response: httpx.Response) -> bool:
    return "RateLimit" in response.headers or "RateLimit-Policy" in response.headers


def faults(client: TestClient | httpx.Client, base_url: str = "") -> int:
    """The ``dealbase_rate_limiter_faults_total`` counter at GET /metrics."""
    response = client.get(f"{base_url}/metrics")
    assert response.status_code == 200, response.text
    match = FAULTS.search(response.text)
    assert match is not None, response.text
    return int(match.group(1))


def counted(client: TestClient, name: str, **labels: str) -> float:
    """A counter's sample at GET /metrics (0 when it has none yet), ``_total`` in its name."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def assert_rate_limited(response: httpx.Response) -> int:
    """A 429 problem with code rate_limited; returns its Retry-After (whole seconds, >= 1)."""
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert (body["status"], body["code"]) == (429, "rate_limited"), body
    retry_after = response.headers["Retry-After"]
    assert re.fullmatch(r"[1-9]\d*", retry_after), retry_after
    return int(retry_after)


def all_at_once(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Runs every call in a thread of its own, released together; results in call order."""
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = calls[index]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [result for result in results if result is not None]


# How long the kernel may take to stop a process before a test fails: a bound for failing.
STOP_TIMEOUT_S = 10.0


@contextmanager
def frozen(server: RedisServer) -> Iterator[None]:
    """The server's Redis stopped dead (SIGSTOP) while the block runs, and going on after it: it
    reads and answers nothing, as a Redis stalled by a long command, while the kernel still takes
    its connections and what they send. The block starts once the process is stopped, so whatever
    the block sees answered was answered without Redis."""
    client = server.client()
    try:
        pid = int(client.info("server")["process_id"])
    finally:
        client.close()
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _process_state(pid) not in {"T", "t"}:
            assert time.monotonic() < deadline, f"Redis not stopped in {STOP_TIMEOUT_S} s"
            time.sleep(0.001)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (after the command's name, which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]


# Redis keeps its buckets on its own clock, which a test cannot move: those cases measure real
# time, so they run in the serial group. In the process, the test moves the app's clock: nothing
# refills unless the test says so, however long the requests take. A module that imports this
# fixture provides ``redis_url``.
@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.serial), "in-process"])
def limiter(request: pytest.FixtureRequest) -> Limiter:
    """The app's limiter: a real Redis, or the in-process one on a clock the test moves."""
    if request.param == "in-process":
        return Limiter(None, FakeClock())
    url: str = request.getfixturevalue("redis_url")
    return Limiter(url, time.monotonic)
