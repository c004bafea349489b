"""End to end: ``dealbase serve --workers 2`` in a subprocess, provisioned only through the CLI.

Pins the two documented operations over real HTTP, and the key guarantee of the issue: a revoked
or rotated-out key is refused by every server process within 1 second of the CLI returning.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from dealbase.db.database import Database, application_name
from tests.support import (
    DEALBASE,
    RATES_NO_TEST_MEETS,
    SERVER_START_TIMEOUT_S,
    dealbase_serve,
    free_port,
    migrated_scratch_database,
    stop_process,
    wait_until_served,
)

API = "/api/v1/integration"
REFUSAL_DEADLINE_S = 1.0  # the requirement: refused by every process 1 s after the CLI returns
OBSERVE_S = 1.6  # how long requests keep coming after the CLI returns, at least
# ...and, however slowly a loaded machine answers them, until each caller has made enough
# requests after REFUSAL_DEADLINE_S to judge (or this long, and the test fails).
OBSERVE_LIMIT_S = 30.0
# How long a scrape may take to count every worker's requests before the test fails (a failure
# bound: the workers write theirs every KEEP_UP_SECONDS).
SCRAPE_WAIT_S = 30.0
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
CUSTOMER_FIELDS = {
    "id",
    "external_id",
    "tenant_id",
    "last_name",
    "first_name",
    "company",
    "website",
    "title",
    "phone_1",
    "phone_2",
    "phone_3",
    "phone_1_label",
    "phone_2_label",
    "phone_3_label",
    "email",
    "postcode",
    "address",
    "address_addition",
    "city",
    "country",
    "state",
    "contact_origin",
    "birthday",
    "note",
    "created_at",
    "updated_at",
}
DEAL_FIELDS = {
    "id",
    "external_id",
    "name",
    "volume",
    "deal_origin",
    "employee_id",
    "employee_name",
    "step_id",
    "department_id",
    "note",
    "created_at",
    "updated_at",
    "customers",
}


@dataclass(frozen=True)
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    database: Database
    log: Path
    metrics_dir: Path

    def cli(self, *args: str) -> Any:
        """Runs ``dealbase ARGS --json`` in a new process; returns its one JSON value."""
        done = subprocess.run(
            [str(DEALBASE), *args, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"dealbase {' '.join(args)}: {done.stderr}"
        return json.loads(done.stdout)

    def workers(self) -> list[int]:
        """Pids of the server's worker processes (children of ``dealbase serve`` that uvicorn
        spawned, not multiprocessing's resource tracker)."""
        children = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == self.process.pid and b"spawn_main" in command:
                children.append(int(entry.name))
        return children

    def listeners(self) -> int:
        with self.database.control() as connection:
            count: int = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'dealbase-listener' AND query LIKE 'LISTEN %'"
                )
            ).scalar_one()
            return count

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _start_server(
    database_url: str, data_dir: Path, extra_env: dict[str, str] | None = None
) -> Iterator[Server]:
    settings = {
        "DEALBASE_DATABASE_URL": database_url,
        "DEALBASE_LOG_LEVEL": "warning",
        # The revocation checks send hundreds of requests a second with one key, and go on
        # once it is refused 401.
        **RATES_NO_TEST_MEETS,
        "DEALBASE_RATE_LIMIT_AUTH_FAILURES": "100000/s",
        "DEALBASE_RATE_LIMIT_AUTH_FAILURES_BURST": "1000000",
        "PROMETHEUS_MULTIPROC_DIR": str(data_dir / "metrics"),
        **(extra_env or {}),
    }
    database = Database(database_url, pool_size=1)
    try:
        with dealbase_serve(data_dir, settings, "--workers", "2") as served:
            server = Server(
                served.base_url,
                served.process,
                served.env,
                database,
                served.log,
                data_dir / "metrics",
            )
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while True:
                assert served.process.poll() is None, f"server exited: {server.output()}"
                try:
                    ready = (
                        httpx.get(f"{server.base_url}/openapi.json", timeout=1).status_code == 200
                    )
                except httpx.TransportError:
                    ready = False
                workers, listeners = server.workers(), server.listeners()
                # Both workers listen for key changes once their app has started.
                if ready and len(workers) == 2 and listeners == 2:
                    break
                assert time.monotonic() < deadline, (
                    f"server not ready (answering: {ready}, workers: {workers},"
                    f" key listeners: {listeners}): {server.output()}"
                )
                time.sleep(0.05)
            yield server
    finally:
        database.dispose()


@pytest.fixture(scope="module")
def server(postgres_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with migrated_scratch_database(postgres_server, "serve") as url:
        yield from _start_server(url, tmp_path_factory.mktemp("serve"))


@dataclass(frozen=True)
class Provisioned:
    tenant: dict[str, Any]
    department: dict[str, Any]
    key: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        return headers(self.key["api_key"], self.department["id"])

    @property
    def first_step_id(self) -> str:
        step_id: str = next(s["id"] for s in self.department["steps"] if s["position"] == 1)
        return step_id


def headers(api_key: str, department_id: str) -> dict[str, str]:
    return {"X-Api-Key": api_key, "X-Department-Id": department_id, "Connection": "close"}


def _provision(server: Server) -> Provisioned:
    tenant = server.cli("tenant", "create", f"e2e-{os.urandom(4).hex()}")
    department = server.cli("department", "create", "--tenant", tenant["id"], "Sales")
    key = server.cli("key", "issue", "--tenant", tenant["id"], "--department", department["id"])
    return Provisioned(tenant, department, key)


@pytest.fixture(scope="module")
def provisioned(server: Server) -> Provisioned:
    return _provision(server)


def _a_key_every_worker_holds(
    server: Server, provisioned: Provisioned
) -> tuple[str, dict[str, str]]:
    """The id and headers of a new key of the provisioned department, used until each worker
    has it cached."""
    issued = server.cli(
        "key",
        "issue",
        "--tenant",
        provisioned.tenant["id"],
        "--department",
        provisioned.department["id"],
    )
    key_headers = headers(issued["api_key"], provisioned.department["id"])
    _warm_every_worker(server, key_headers)
    return issued["key_id"], key_headers


def _assert_customer_shape(customer: dict[str, Any], tenant_id: str) -> None:
    assert set(customer) == CUSTOMER_FIELDS
    assert customer["tenant_id"] == tenant_id
    assert TIMESTAMP.match(customer["created_at"]), customer["created_at"]
    assert TIMESTAMP.match(customer["updated_at"]), customer["updated_at"]


def test_post_customer_answers_201_with_location_and_the_documented_shape(
    server: Server, provisioned: Provisioned
) -> None:
    sent = {"last_name": "Lovelace", "first_name": "Ada", "birthday": "1985-12-10"}

    response = httpx.post(
        f"{server.base_url}{API}/customers", json=sent, headers=provisioned.headers
    )

    assert response.status_code == 201, response.text
    customer = response.json()
    _assert_customer_shape(customer, provisioned.tenant["id"])
    assert {name: customer[name] for name in sent} == sent
    unsent = CUSTOMER_FIELDS - set(sent) - {"id", "tenant_id", "created_at", "updated_at"}
    assert {name: customer[name] for name in unsent} == dict.fromkeys(unsent)
    assert response.headers["Location"] == f"{API}/customers/{customer['id']}"
    again = httpx.get(server.base_url + response.headers["Location"], headers=provisioned.headers)
    assert again.status_code == 200, f"{again.text}\n{server.output()}"
    assert again.json() == customer


def test_post_deal_answers_201_with_location_and_the_documented_shape(
    server: Server, provisioned: Provisioned
) -> None:
    sent = {
        "name": "Analytical engine",
        "volume": 125000,
        "customers": [{"last_name": "Babbage"}, {"last_name": "Lovelace", "first_name": "Ada"}],
    }

    response = httpx.post(f"{server.base_url}{API}/deals", json=sent, headers=provisioned.headers)

    assert response.status_code == 201, response.text
    deal = response.json()
    assert set(deal) == DEAL_FIELDS
    assert (deal["name"], deal["volume"], deal["deal_origin"], deal["note"]) == (
        "Analytical engine",
        125000,
        None,
        None,
    )
    assert (deal["employee_id"], deal["employee_name"]) == (None, None)
    assert deal["step_id"] == provisioned.first_step_id
    assert deal["department_id"] == provisioned.department["id"]
    assert TIMESTAMP.match(deal["created_at"]) and TIMESTAMP.match(deal["updated_at"])
    assert [c["last_name"] for c in deal["customers"]] == ["Babbage", "Lovelace"]
    assert len({c["id"] for c in deal["customers"]}) == 2
    for customer in deal["customers"]:
        _assert_customer_shape(customer, provisioned.tenant["id"])
    assert response.headers["Location"] == f"{API}/deals/{deal['id']}"
    again = httpx.get(server.base_url + response.headers["Location"], headers=provisioned.headers)
    assert again.status_code == 200, f"{again.text}\n{server.output()}"
    assert again.json() == deal


@dataclass(frozen=True)
class Sample:
    label: str
    started: float  # seconds after the CLI command returned
    finished: float
    status: int


def _create_customer(http: httpx.Client, server: Server, request_headers: dict[str, str]) -> int:
    """One authenticated request on a new connection (``Connection: close``), so the kernel may
    hand it to either worker."""
    response = http.post(
        f"{server.base_url}{API}/customers",
        json={"last_name": "Probe"},
        headers=request_headers,
        timeout=5,
    )
    return response.status_code


def _database_now(server: Server) -> datetime:
    with server.database.control() as connection:
        now: datetime = connection.execute(text("SELECT clock_timestamp()")).scalar_one()
        return now


def _workers_that_queried_since(server: Server, since: datetime) -> list[bool]:
    """For each worker: has one of its pooled connections run a statement since ``since``?

    Each process names its pool's connections after its pid (``application_name``); the
    key-change listener has a name of its own and only ever runs LISTEN.
    """
    answers = []
    with server.database.control() as connection:
        for pid in server.workers():
            active = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"
                    " AND query_start >= :since"
                ),
                {"name": application_name(pid), "since": since},
            ).scalar_one()
            answers.append(active > 0)
    return answers


def _warm_every_worker(server: Server, request_headers: dict[str, str]) -> None:
    """Uses the key until each of the two workers has answered with it, so each caches it."""
    since = _database_now(server)
    deadline = time.monotonic() + 15
    while True:
        statuses = _in_parallel(lambda http: _create_customer(http, server, request_headers), 8)
        assert statuses == [201] * 8
        served = _workers_that_queried_since(server, since)
        if served == [True, True]:
            return
        assert time.monotonic() < deadline, f"a worker never served the key: {served}"


def _in_parallel(call: Callable[[httpx.Client], int], count: int) -> list[int]:
    results: list[int] = [0] * count

    def run(index: int) -> None:
        with httpx.Client() as http:
            results[index] = call(http)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _observe(
    server: Server,
    clients: list[httpx.Client],
    callers: dict[str, dict[str, str]],
    since: float,
    late_each: int,
) -> list[Sample]:
    """Requests from one thread per client, each on a new connection, from ``since`` for
    OBSERVE_S, and on until each caller has made ``late_each`` that started REFUSAL_DEADLINE_S
    or more after ``since``; the clients are made beforehand so that the first requests leave
    at once."""
    samples: list[Sample] = []
    lock = threading.Lock()

    def enough() -> bool:
        with lock:
            late = Counter(s.label for s in samples if s.started >= REFUSAL_DEADLINE_S)
        return all(late[label] >= late_each for label in callers)

    def run(offset: int) -> None:
        labels = list(callers)
        turn = offset
        http = clients[offset]
        while (started := time.monotonic() - since) < OBSERVE_S or (
            started < OBSERVE_LIMIT_S and not enough()
        ):
            label = labels[turn % len(labels)]
            turn += 1
            status = _create_customer(http, server, callers[label])
            with lock:
                samples.append(Sample(label, started, time.monotonic() - since, status))
            time.sleep(0.01)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples


@pytest.fixture
def clients() -> Iterator[list[httpx.Client]]:
    with ExitStack() as stack:
        yield [stack.enter_context(httpx.Client()) for _ in range(4)]


def _report(samples: list[Sample], label: str) -> str:
    mine = sorted((s for s in samples if s.label == label), key=lambda s: s.started)
    return (
        f"{len(mine)} requests from {mine[0].started * 1000:.0f} ms after the CLI returned;"
        f" last accepted answer at {_last_accepted(samples, label)} s"
    )


def _last_accepted(samples: list[Sample], label: str) -> float | None:
    accepted = [s.finished for s in samples if s.label == label and s.status == 201]
    return max(accepted, default=None)


# A bound of one second on a change reaching every worker. Measured on the 2-core machine
# beside two busy loops: no request accepted after the CLI returned (the first 2 to 28 ms on).
@pytest.mark.serial
def test_a_revoked_key_is_refused_by_every_worker_within_one_second_of_the_cli(
    server: Server, provisioned: Provisioned, clients: list[httpx.Client]
) -> None:
    key_id, key_headers = _a_key_every_worker_holds(server, provisioned)

    server.cli("key", "revoke", key_id)
    returned = time.monotonic()
    samples = _observe(server, clients, {"revoked": key_headers}, returned, late_each=20)

    late = [s for s in samples if s.started >= REFUSAL_DEADLINE_S]
    last = _last_accepted(samples, "revoked")
    print(f"\nrevoked key: {_report(samples, 'revoked')}")
    assert {s.status for s in samples} <= {201, 401}, samples
    assert len(late) >= 20, f"too few requests after {REFUSAL_DEADLINE_S} s: {len(late)}"
    assert [s for s in late if s.status != 401] == [], f"last accepted at {last} s"


# A bound of one second on a change reaching every worker (measured as the revocation's).
@pytest.mark.serial
def test_a_rotated_out_secret_is_refused_within_one_second_and_the_new_one_accepted(
    server: Server, provisioned: Provisioned, clients: list[httpx.Client]
) -> None:
    key_id, old_headers = _a_key_every_worker_holds(server, provisioned)

    rotated = server.cli("key", "rotate", key_id, "--grace-seconds", "0")
    returned = time.monotonic()
    new_headers = headers(rotated["api_key"], provisioned.department["id"])
    samples = _observe(
        server, clients, {"old": old_headers, "new": new_headers}, returned, late_each=10
    )

    late = [s for s in samples if s.started >= REFUSAL_DEADLINE_S]
    last_old = _last_accepted(samples, "old")
    first_new = min(
        (s.started for s in samples if s.label == "new" and s.status == 201), default=None
    )
    print(f"\nrotated key, old secret: {_report(samples, 'old')}; new first accepted {first_new}")
    assert rotated["key_id"] == key_id
    assert rotated["api_key"] != old_headers["X-Api-Key"]
    assert {s.status for s in samples} <= {201, 401}, samples
    assert sum(s.label == "old" for s in late) >= 10, _report(samples, "old")
    assert sum(s.label == "new" for s in late) >= 10, _report(samples, "new")
    assert [s for s in late if s.label == "old" and s.status != 401] == [], last_old
    assert [s for s in late if s.label == "new" and s.status != 201] == []


def _counted(metrics_text: str, route: str, status: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == "dealbase_http_requests_total"
        and sample.labels == {"route": route, "method": "GET", "status": status}
    )


def _counted_by_each_worker(server: Server, route: str) -> dict[str, float]:
    """Each worker's own count, read from its file alone: pid -> requests counted."""
    counts = {}
    for path in server.metrics_dir.glob("counter_*.db"):
        with tempfile.TemporaryDirectory() as alone:
            shutil.copy(path, alone)
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=alone)  # type: ignore[no-untyped-call]
            counts[path.stem.rsplit("_", 1)[1]] = _counted(
                generate_latest(registry).decode(), route, "401"
            )
    return counts


def _unauthenticated_gets_until_both_workers_answered(server: Server, route: str) -> int:
    """Sends GETs eight at a time until each worker has answered some; returns how many."""
    url = server.base_url + route.replace("{customer_id}", str(uuid.uuid4()))
    before = _counted_by_each_worker(server, route)
    sent, deadline = 0, time.monotonic() + 15
    while True:
        now = _counted_by_each_worker(server, route)
        workers = {str(pid) for pid in server.workers()}
        if all(now.get(pid, 0) > before.get(pid, 0) for pid in workers):
            return sent
        assert time.monotonic() < deadline, "a worker answered none of the requests"
        statuses = _in_parallel(lambda http: http.get(url).status_code, 8)
        assert statuses == [401] * 8
        sent += 8


def _scraped_until(url: str, route: str, count: float) -> float:
    """The route's 401s a scrape of ``url`` counts, once one counts ``count`` or more: each
    worker writes what it counted once a second (``KEEP_UP_SECONDS``), so a scrape may miss the
    last second of another worker's."""
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while True:
        scraped = httpx.get(url, headers={"Connection": "close"})
        assert scraped.status_code == 200
        counted = _counted(scraped.text, route, "401")
        if counted >= count:
            return counted
        assert time.monotonic() < deadline, f"{counted} of {count} counted"
        time.sleep(0.1)


def test_one_scrape_adds_up_the_requests_of_every_worker(server: Server) -> None:
    route = f"{API}/customers/{{customer_id}}"
    before = _counted(httpx.get(f"{server.base_url}/metrics").text, route, "401")

    sent = _unauthenticated_gets_until_both_workers_answered(server, route)

    # Whichever worker answers the scrape, it reports both workers' counts, once the other
    # worker has written what it counted.
    assert _scraped_until(f"{server.base_url}/metrics", route, before + sent) == before + sent
    for _ in range(6):
        scraped = httpx.get(f"{server.base_url}/metrics", headers={"Connection": "close"})
        assert scraped.status_code == 200
        assert _counted(scraped.text, route, "401") == before + sent


def test_metrics_on_their_own_port_are_not_served_on_the_api_port(
    postgres_server: str, tmp_path: Path
) -> None:
    metrics_port = free_port()
    with migrated_scratch_database(postgres_server, "metrics_port") as url:
        for server in _start_server(
            url, tmp_path / "serve", {"DEALBASE_METRICS_PORT": str(metrics_port)}
        ):
            sent = _unauthenticated_gets_until_both_workers_answered(
                server, f"{API}/customers/{{customer_id}}"
            )
            assert httpx.get(f"{server.base_url}/metrics").status_code == 404
            # The serving process reads the workers' files, which they write every second.
            metrics = f"http://127.0.0.1:{metrics_port}/metrics"
            assert _scraped_until(metrics, f"{API}/customers/{{customer_id}}", sent) == sent


def test_json_logs_name_the_caller_and_never_hold_a_secret_or_a_body(
    postgres_server: str, tmp_path: Path
) -> None:
    """Every line a served process writes, uvicorn's included, is one JSON object; a request has
    one access line, which names the tenant, department, key id and route; no line holds the
    key's secret or a value of a request body."""
    marker = f"unique-{uuid.uuid4().hex}"
    json_logs = {"DEALBASE_LOG_FORMAT": "json", "DEALBASE_LOG_LEVEL": "info"}
    with migrated_scratch_database(postgres_server, "logs") as url:
        for server in _start_server(url, tmp_path / "serve", json_logs):
            provisioned = _provision(server)
            created = httpx.post(
                f"{server.base_url}{API}/customers",
                json={"last_name": marker, "note": marker},
                headers=provisioned.headers,
            )
            assert created.status_code == 201, created.text
            wrong = {**provisioned.headers, "X-Api-Key": provisioned.key["api_key"] + "x"}
            refused = httpx.post(
                f"{server.base_url}{API}/customers", json={"last_name": marker}, headers=wrong
            )
            assert refused.status_code == 401
            read = httpx.post(
                f"{server.base_url}/graphql",
                json={"query": "{ deals { totalCount } departments { id } }"},
                headers=provisioned.headers,
            )
            assert read.status_code == 200, read.text
            listed = f"{server.base_url}{API}/customers"
            got = httpx.get(listed, headers=provisioned.headers)
            headed = httpx.head(listed, headers=provisioned.headers)
            assert (headed.status_code, headed.content) == (200, b"")
            assert headed.headers["content-length"] == got.headers["content-length"]
            stop_process(server.process)
            lines = server.log.read_text().splitlines()

    records = [json.loads(line) for line in lines]  # every line is JSON
    assert any(r.get("logger", "").startswith("uvicorn") for r in records), "uvicorn's lines"
    secret = provisioned.key["api_key"].split("_", 2)[2]  # dbk_<key id>_<secret>
    everything = "\n".join(lines)
    assert len(secret) == 43
    assert secret not in everything
    assert marker not in everything
    # One access line a request, the edge's: uvicorn's own would repeat it.
    assert not [r for r in records if r.get("logger") == "uvicorn.access"]
    [access] = [r for r in records if r.get("event") == "request" and r.get("status") == 201]
    assert access["route"] == f"{API}/customers"
    assert access["method"] == "POST"
    assert access["tenant_id"] == provisioned.tenant["id"]
    assert access["department_id"] == provisioned.department["id"]
    assert access["key_id"] == provisioned.key["key_id"]
    assert access["duration_ms"] > 0
    # A GraphQL query's line says which path each root field took.
    [graphql] = [r for r in records if r.get("event") == "request" and r.get("route") == "/graphql"]
    assert graphql["graphql_root_fields"] == {"deals": "compiled", "departments": "resolvers"}


# A burst of requests and a shutdown with a grace period of seconds: a client's next request on
# an idle connection must reach the draining server within DRAIN_SECONDS (1 s). Measured on the
# 2-core machine beside two busy loops: a request took 0.13 s at most, the gap before the next
# under 1 ms.
@pytest.mark.serial
def test_sigterm_during_a_burst_answers_every_request_that_reached_the_server(
    postgres_server: str, tmp_path: Path
) -> None:
    """Four clients loop POSTs on keep-alive connections; SIGTERM comes mid-burst. Each request
    either is answered (201) or finds the server no longer accepting connections; none is sent
    and then dropped."""
    outcomes: list[int | str] = []
    with migrated_scratch_database(postgres_server, "sigterm") as url:
        for server in _start_server(url, tmp_path / "serve"):
            provisioned = _provision(server)
            keep_alive = {
                "X-Api-Key": provisioned.key["api_key"],
                "X-Department-Id": provisioned.department["id"],
            }

            def loop(index: int, base_url: str, keep_alive: dict[str, str]) -> None:
                with httpx.Client(timeout=30) as http:
                    for sent in range(100_000):
                        try:
                            response = http.post(
                                f"{base_url}{API}/customers",
                                json={"last_name": f"client {index} request {sent}"},
                                headers=keep_alive,
                            )
                        except httpx.ConnectError:
                            outcomes.append("refused")
                            return
                        except httpx.HTTPError as exc:
                            outcomes.append(f"{type(exc).__name__}: {exc}")
                            return
                        outcomes.append(response.status_code)

            clients = [
                threading.Thread(target=loop, args=(index, server.base_url, keep_alive))
                for index in range(4)
            ]
            for client in clients:
                client.start()
            # Mid-burst: every client has been answered a few times and goes on sending.
            deadline = time.monotonic() + 30
            while outcomes.count(201) < 40:
                assert time.monotonic() < deadline, f"the burst did not start: {outcomes[-5:]}"
                time.sleep(0.01)
            server.process.send_signal(signal.SIGTERM)
            for client in clients:
                client.join(timeout=60)
            assert server.process.wait(timeout=60) == 0, server.output()

    dropped = [outcome for outcome in outcomes if isinstance(outcome, str) and outcome != "refused"]
    assert dropped == [], dropped
    assert outcomes.count("refused") == 4
    assert {outcome for outcome in outcomes if isinstance(outcome, int)} == {201}
    assert outcomes.count(201) > 20


def test_sigterm_stops_the_embedded_postgresql_that_serve_started(tmp_path: Path) -> None:
    # Not under pytest's private (0700) folder: as root the embedded server runs as pgserver's
    # own user, which must reach its data.
    data_dir = Path(tempfile.mkdtemp(prefix="dealbase-embedded-"))
    data_dir.chmod(0o755)
    env = {name: value for name, value in os.environ.items() if not name.startswith("DEALBASE_")}
    env |= {"DEALBASE_DATA_DIR": str(data_dir), "DEALBASE_LOG_LEVEL": "warning"}
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(DEALBASE), "serve", "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_served(
            process, f"http://127.0.0.1:{port}/readyz", log.read_text, SERVER_START_TIMEOUT_S
        )
        postmaster = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])

        process.send_signal(signal.SIGTERM)

        assert process.wait(timeout=30) == 0, log.read_text()
        deadline = time.monotonic() + 10
        while _alive(postmaster):
            assert time.monotonic() < deadline, "the embedded PostgreSQL still runs"
            time.sleep(0.1)
    finally:
        stop_process(process)
        shutil.rmtree(data_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("path", [f"{API}/customers", "/graphql"])
def test_a_client_that_sends_a_whole_oversized_body_before_reading_gets_the_413(
    server: Server, path: str
) -> None:
    """urllib sends the whole body, with Connection: close, before it reads the answer: the
    server reads the body to its end before it answers 413, so the answer is not reset."""
    body = json.dumps({"last_name": "x" * (2 * 1024 * 1024)}).encode()
    statuses = []
    for _ in range(10):
        # The test server's http:// URL, nothing a user supplies.
        request = urllib.request.Request(  # noqa: S310
            server.base_url + path,
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                statuses.append(response.status)
        except urllib.error.HTTPError as refused:
            statuses.append(refused.code)
    assert statuses == [413] * 10
