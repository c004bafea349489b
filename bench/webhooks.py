"""Webhook delivery: how many events one `dealbase worker` delivers a second, and how long an
event waits from its commit to its delivery, each beside a peer measured in the same run.

    .venv/bin/python bench/webhooks.py                        # 5000 events; delay at 50/s, 5/s
    .venv/bin/python bench/webhooks.py --events 1000 --delay-seconds 3
    .venv/bin/python bench/webhooks.py --parts unordered --profile   # py-spy on the worker
    .venv/bin/python bench/webhooks.py --parts delay --poll-interval 0.05   # an experiment

`make bench` runs it after the wrk scenarios (`BENCH_SCENARIOS=webhooks` runs it alone), with
BENCH_WEBHOOK_EVENTS events (default 500 per BENCH_SECONDS) and BENCH_WEBHOOK_RATE commits a
second (default 50) for BENCH_SECONDS.

Everything runs on a scratch database of its own (made and dropped as `make bench`'s is), with a
tenant per part, events made through the platform service in units of work (`customers.create`,
which records `customer.created`), and one webhook endpoint per part pointing at a receiver: a
raw asyncio HTTP server in a process of its own that answers 204 at once and records each
request's `webhook-id`, body and arrival time. The worker is `dealbase worker`, a process of its
own, with DEALBASE_WEBHOOKS_ALLOW_PRIVATE=true so it may post to http://127.0.0.1.

Throughput: N events recorded while no worker runs, then a worker started; events a second from
the moment it says it is delivering to the last arrival. The peer, right before it: the same N
bodies, with the same headers (signed), POSTed to the same receiver by a plain
httpx.AsyncClient the way the worker sends them, without the database: one at a time for an
ordered endpoint, in gathered batches of the worker's deliveries per step (50) for an
`ordered: false` one. So the ratio says what the rest (the database work, the worker's own)
costs. CPU per event is read from /proc for the worker, its PostgreSQL backends (found by the
application_name its connections carry) and the receiver; the peer's is this process's.

Delay: a worker idle, then one customer committed at a time at the rate for the seconds, to an
ordered endpoint and to an `ordered: false` one, and to an ordered one at a tenth of the rate
(sparse traffic); the delay is the arrival at the receiver minus
the moment the commit returned to the client (matched by the customer's id in the event's
data). The peer: the same commits, each followed at once by a POST of its own to the receiver
(the least delay a delivery could have: the HTTP hop).

Every event must arrive: the receiver's distinct webhook-ids are checked against the events'
ids, and a part that lost any fails loudly (exit 1, FAILED in the table). An ordered endpoint's
arrivals must also be in commit order.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import psycopg
from harness.console import arguments_parser, sayer
from harness.figures import number, percentile
from harness.paths import RESULTS, ROOT, venv_tool
from harness.proc import cpu_seconds
from harness.processes import Service, ServiceFailed, free_port, log_tail
from harness.profiling import start_recording, stop_recording, summarize
from harness.settings import DEFAULT_SERVER
from harness.stack import clean_environment, scratch_database
from harness.standalone import PartsReport, run_alone, stamp
from harness.tools import ensure_py_spy, load_average

from dealbase.db.database import Database, application_name
from dealbase.migrations.runner import upgrade_control
from dealbase.ops import admin
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import repository as events_repository
from dealbase.platform.events import service as events
from dealbase.platform.events.models import RETENTION_DAYS, EventFilter, event_json
from dealbase.platform.resources import customer_json
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks import signing
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import Scope
from dealbase.worker.limits import WorkerLimits
from dealbase.worker.sending import USER_AGENT

THIS = Path(__file__).resolve()
READY = "dealbase worker: delivering webhooks"
DEFAULT_STEP = WorkerLimits().deliveries_per_step
POLL_INTERVAL_S = WorkerLimits().poll_interval.total_seconds()
# Events made per unit of work for the throughput parts (the worker is not running then).
EVENTS_PER_UNIT = 100
# A part whose receiver saw nothing new for this long has lost what is still missing.
STALL_SECONDS = 30.0


say = sayer("bench: webhooks")


# --- the receiver: its own process, answers every POST /hooks/<tag> with 204 -------------------


class _ReceiverState:
    """What arrived, per tag: (webhook-id, monotonic time, wall time, body)."""

    def __init__(self) -> None:
        self.arrivals: dict[str, list[tuple[str, float, float, bytes]]] = {}
        self.distinct: dict[str, set[str]] = {}

    def answer(self, method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if method == "POST" and target.startswith("/hooks/"):
            tag = target.removeprefix("/hooks/")
            message_id = headers.get("webhook-id", "")
            self.arrivals.setdefault(tag, []).append(
                (message_id, time.monotonic(), time.time(), body)
            )
            self.distinct.setdefault(tag, set()).add(message_id)
            return b"HTTP/1.1 204 No Content\r\n\r\n"
        parts = urlsplit(target)
        tag = parse_qs(parts.query).get("tag", [""])[0]
        if method == "GET" and parts.path == "/count":
            payload = orjson.dumps(
                {
                    "requests": len(self.arrivals.get(tag, ())),
                    "distinct": len(self.distinct.get(tag, ())),
                }
            )
        elif method == "GET" and parts.path == "/records":
            payload = orjson.dumps(
                [
                    [message_id, mono, wall, body.decode()]
                    for message_id, mono, wall, body in self.arrivals.get(tag, ())
                ]
            )
        elif method == "GET" and parts.path == "/health":
            payload = b"{}"
        else:
            return b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(payload)
        ) + payload


class _Receiving(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, just enough of it: a head, then content-length bytes."""

    def __init__(self, state: _ReceiverState) -> None:
        self.state = state
        self.buffer = bytearray()
        # uvloop's transport is a stream transport without deriving from asyncio.Transport.
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(buffer) < end + 4 + length:
                return
            body = bytes(buffer[end + 4 : end + 4 + length])
            del buffer[: end + 4 + length]
            self.transport.write(self.state.answer(method, target, headers, body))


def receive(port: int) -> None:
    """The receiver's process (`webhooks.py receive --port N`), until SIGTERM."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def serve() -> None:
        state = _ReceiverState()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        server = await loop.create_server(lambda: _Receiving(state), "127.0.0.1", port, backlog=512)
        async with server:
            await stop.wait()

    asyncio.run(serve())


@dataclass(frozen=True)
class Arrival:
    message_id: str
    monotonic: float
    wall: float
    body: bytes


class Receiver:
    """The receiver's process, and what the bench asks it."""

    def __init__(self, log_path: Path) -> None:
        port = free_port()
        self.service = Service(
            "receiver",
            [sys.executable, str(THIS), "receive", "--port", str(port)],
            environment=clean_environment(),
            log_path=log_path,
            port=port,
            cwd=ROOT,
        )
        self.service.wait_ready(lambda client: client.get("/health").status_code == 200)
        self.client = httpx.Client(base_url=self.service.base_url, timeout=60.0, trust_env=False)

    @property
    def pid(self) -> int:
        return self.service.pid

    def url(self, tag: str) -> str:
        return f"{self.service.base_url}/hooks/{tag}"

    def count(self, tag: str) -> tuple[int, int]:
        """Requests and distinct webhook-ids received for the tag."""
        counted = self.client.get("/count", params={"tag": tag}).json()
        return counted["requests"], counted["distinct"]

    def arrivals(self, tag: str) -> list[Arrival]:
        rows = self.client.get("/records", params={"tag": tag}).json()
        return [Arrival(row[0], row[1], row[2], row[3].encode()) for row in rows]

    def wait_for(self, tag: str, expected: int, *, stall: float = STALL_SECONDS) -> bool:
        """Until `expected` distinct webhook-ids have arrived; False when nothing new arrived
        for `stall` seconds first."""
        last, since = -1, time.monotonic()
        while True:
            _, distinct = self.count(tag)
            if distinct >= expected:
                return True
            now = time.monotonic()
            if distinct != last:
                last, since = distinct, now
            elif now - since > stall:
                return False
            time.sleep(0.05)

    def stop(self) -> None:
        self.client.close()
        self.service.stop()


# --- processes' CPU ----------------------------------------------------------------------------


def backends_cpu(observer: psycopg.Connection[Any], client_pid: int) -> float | None:
    """CPU of the PostgreSQL backends serving a dealbase process's connections (read while they
    are open; PostgreSQL on this host)."""
    pids = [
        pid
        for (pid,) in observer.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (application_name(client_pid),),
        )
    ]
    readings = [cpu_seconds(pid) for pid in pids]
    if not readings or any(reading is None for reading in readings):
        return None
    return sum(reading for reading in readings if reading is not None)


# --- the worker ---------------------------------------------------------------------------------


class Worker:
    """`dealbase worker` on a database, with ``environment`` beside its own settings;
    `poll_interval` (an experiment, not what `make bench` measures) runs the same worker through
    this file with another poll interval, which the command does not take."""

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        deliveries_per_step: int | None = None,
        poll_interval: float | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        command = [venv_tool("dealbase"), "worker"]
        if deliveries_per_step is not None:
            command += ["--deliveries-per-step", str(deliveries_per_step)]
        if poll_interval is not None:
            command = [
                sys.executable,
                str(THIS),
                "worker",
                "--deliveries-per-step",
                str(deliveries_per_step or DEFAULT_STEP),
                "--poll-interval",
                str(poll_interval),
            ]
        self.log_path = log_path
        self.service = Service(
            "worker",
            command,
            environment={
                **clean_environment(),
                **(environment or {}),
                "DEALBASE_DATABASE_URL": database_url,
                "DEALBASE_WEBHOOKS_ALLOW_PRIVATE": "true",
                "DEALBASE_LOG_FORMAT": "json",
                "DEALBASE_LOG_LEVEL": "info",
            },
            log_path=log_path,
            port=0,
            cwd=ROOT,
        )

    @property
    def pid(self) -> int:
        return self.service.pid

    def wait_ready(self, timeout: float = 90.0) -> float:
        """The monotonic time at which the worker said it is delivering."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.service.process.poll() is not None:
                raise ServiceFailed(
                    f"dealbase worker exited with {self.service.process.returncode}; the end of"
                    f" {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if READY in self.log_path.read_text(errors="replace"):
                return time.monotonic()
            time.sleep(0.01)
        raise ServiceFailed(f"dealbase worker did not start within {timeout:.0f} s")

    def problems(self, levels: tuple[str, ...] = ("error", "warning")) -> list[str]:
        """Lines of its log at these levels, and tracebacks: what went wrong."""
        marks = [f'"level": "{level}"' for level in levels] + ["Traceback"]
        text = self.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if any(mark in line for mark in marks)]

    def failures(self) -> str:
        return "\n".join(self.problems())

    def stop(self) -> None:
        self.service.stop()


def run_worker(deliveries_per_step: int, poll_interval: float) -> None:
    """`webhooks.py worker`: what `dealbase worker` runs, with another poll interval."""
    from dealbase.config import Settings
    from dealbase.ops.embedded_postgres import database_url_of
    from dealbase.worker import main

    settings = Settings()
    limits = WorkerLimits(
        deliveries_per_step=deliveries_per_step, poll_interval=timedelta(seconds=poll_interval)
    )
    main.run_worker(settings, database_url_of(settings), limits)


# --- the scratch world: tenants, endpoints, events ----------------------------------------------


@dataclass(frozen=True)
class Place:
    """A tenant's department with (once made) a webhook endpoint."""

    scope: Scope
    secret: str = ""


def new_place(database: Database, name: str) -> Place:
    tenant = create_tenant(database, name)
    department = admin.create_department(database, tenant.id, "Sales")
    return Place(tenant.scope.in_department(department.id))


def add_endpoint(database: Database, place: Place, url: str, *, ordered: bool) -> Place:
    """An endpoint through the service, its URL taken as checked (the receiver is on the
    loopback, which only the worker's policy may refuse)."""
    fields = WebhookEndpointFields(url=url, events=["*"], ordered=ordered)
    with database.unit_of_work(place.scope) as uow:
        made = endpoints.create(uow, Checked(fields))
    return replace(place, secret=made.secret)


def customer(index: int) -> CustomerFields:
    return CustomerFields(
        last_name=f"Webhook {index}", first_name="Ada", email=f"ada{index}@example.com"
    )


def record_events(database: Database, place: Place, count: int) -> None:
    """`count` customer.created events, EVENTS_PER_UNIT to a unit of work."""
    made = 0
    while made < count:
        with database.unit_of_work(place.scope) as uow:
            for _ in range(min(EVENTS_PER_UNIT, count - made)):
                customers.create(uow, customer(made))
                made += 1


def event_messages(database: Database, place: Place) -> list[tuple[str, bytes]]:
    """Each event's webhook-id and body, in commit order, as the worker sends them."""
    assert place.scope.department_id is not None
    # Events are numbered after they commit (by the worker, or a reader of the feed): numbered
    # here first, in a transaction of its own, as the worker would before reading them.
    with database.unit_of_work(place.scope) as uow:
        events.number_all_committed(uow, [place.scope.department_id])
    with database.unit_of_work(place.scope) as uow:
        feed_read = events_repository.FeedRead(
            place.scope.tenant_id,
            place.scope.department_id,
            0,
            EventFilter(),
            10_000_000,
            timedelta(days=RETENTION_DAYS),
        )
        found = events_repository.events_after(uow.connection, feed_read)()
    return [(str(event.id), orjson.dumps(event_json(event))) for event in found]


def signed_headers(secret: str, message_id: str, body: bytes) -> dict[str, str]:
    """The headers the worker's Sender sends (Host aside, which httpx sets)."""
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        **signing.headers((secret,), message_id, int(time.time()), body),
    }


# --- figures ------------------------------------------------------------------------------------


@dataclass
class Throughput:
    """One throughput run: the peer's or the worker's."""

    name: str
    what: str
    events: int
    requests: int = 0  # POSTs the receiver got
    distinct: int = 0  # distinct webhook-ids among them
    missing: int = 0  # events whose webhook-id never arrived
    seconds: float = 0.0  # from the start (the worker's "delivering") to the last arrival
    events_per_second: float = 0.0
    first_to_last_seconds: float = 0.0
    sender_cpu_us: float | None = None  # per event: the worker's or the peer's process
    database_cpu_us: float | None = None  # per event: the worker's PostgreSQL backends
    receiver_cpu_us: float | None = None  # per event: the receiver's process
    in_order: bool | None = None  # ordered endpoints: arrivals in commit order
    compare_to: str | None = None
    ratio: float | None = None
    failure: str | None = None
    profile: str | None = None


@dataclass
class Delay:
    """One delay run: commit to arrival, per event."""

    name: str
    what: str
    events: int
    received: int = 0
    missing: int = 0
    committed_per_second: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    mean_ms: float = 0.0
    # The same, from the event's created_at (its transaction's start, the database's clock).
    created_p50_ms: float | None = None
    created_p99_ms: float | None = None
    sender_cpu_us: float | None = None
    database_cpu_us: float | None = None
    compare_to: str | None = None
    ratio: float | None = None
    failure: str | None = None


@dataclass
class Report(PartsReport):
    throughput: list[Throughput] = field(default_factory=list)
    delay: list[Delay] = field(default_factory=list)

    def parts(self) -> dict[str, list[Any]]:
        return {"throughput": self.throughput, "delay": self.delay}


def tables(report: Report) -> str:
    lines: list[str] = []
    if report.throughput:
        lines += [
            "| webhook throughput | events/s | ratio | to | sender CPU µs/event |"
            " PostgreSQL CPU µs/event | receiver CPU µs/event | received (distinct) | in order |",
            "|---|---:|---:|---|---:|---:|---:|---:|---|",
        ]
        for row in report.throughput:
            figure = "FAILED" if row.failure else f"{row.events_per_second:,.0f}"
            order = {True: "yes", False: "NO", None: ""}[row.in_order]
            lines.append(
                f"| {row.name} | {figure} | {number(row.ratio, 2) if row.compare_to else '—'} |"
                f" {row.compare_to or ''} | {number(row.sender_cpu_us)} |"
                f" {number(row.database_cpu_us)} | {number(row.receiver_cpu_us)} |"
                f" {row.requests:,} ({row.distinct:,} of {row.events:,}) | {order} |"
            )
    if report.delay:
        if lines:
            lines.append("")
        lines += [
            "| webhook delay, commit to arrival | events | p50 ms | p90 ms | p99 ms | max ms |"
            " p50 ratio | to | p50 / p99 ms from created_at |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for waited in report.delay:
            if waited.failure:
                lines.append(f"| {waited.name} | {waited.events} | FAILED | | | | | | |")
                continue
            created = (
                f"{waited.created_p50_ms:,.1f} / {waited.created_p99_ms:,.1f}"
                if waited.created_p50_ms is not None and waited.created_p99_ms is not None
                else "—"
            )
            lines.append(
                f"| {waited.name} | {waited.received:,} | {waited.p50_ms:,.1f} | {waited.p90_ms:,.1f} |"
                f" {waited.p99_ms:,.1f} | {waited.max_ms:,.1f} |"
                f" {number(waited.ratio, 1) if waited.compare_to else '—'} | {waited.compare_to or ''} |"
                f" {created} |"
            )
    for row in report.throughput:
        if row.profile:
            lines.append(f"\npy-spy profile of {row.name}: {row.profile}")
    return "\n".join(lines)


# --- the measurements ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    server: str
    events: int
    rate: int
    delay_seconds: int
    logs: Path
    stamp: str
    deliveries_per_step: int = DEFAULT_STEP
    parts: tuple[str, ...] = ("throughput", "delay")
    profile: bool = False
    poll_interval: float | None = None


class Bench:
    """One run: the scratch database, the receiver, and the parts in turn."""

    def __init__(self, options: Options, stack: ExitStack) -> None:
        self.options = options
        self.logs = options.logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.database_url = stack.enter_context(scratch_database(options.server))
        say(f"scratch database {self.database_url.rpartition('/')[2]}")
        self.database = Database(self.database_url, pool_size=2, max_overflow=0)
        stack.callback(self.database.dispose)
        with self.database.control() as connection:
            upgrade_control(connection)
        self.receiver = Receiver(self.logs / "webhook-receiver.log")
        stack.callback(self.receiver.stop)
        self.observer = psycopg.connect(self.database_url, autocommit=True)
        stack.callback(self.observer.close)
        self.py_spy = ensure_py_spy() if options.profile else None

    def worker(self, name: str) -> Worker:
        return Worker(
            self.database_url,
            self.logs / f"webhook-{name}.log",
            self.options.deliveries_per_step,
            self.options.poll_interval,
        )

    # Throughput ---------------------------------------------------------------------------------

    def throughput(self, ordered: bool) -> list[Throughput]:
        mode = "ordered" if ordered else "unordered"
        batch = 1 if ordered else self.options.deliveries_per_step
        n = self.options.events
        place = new_place(self.database, f"webhooks {mode}")
        place = add_endpoint(self.database, place, self.receiver.url(mode), ordered=ordered)
        say(f"{mode}: recording {n} events ({EVENTS_PER_UNIT} per unit of work)")
        record_events(self.database, place, n)
        messages = event_messages(self.database, place)
        if len(messages) != n:
            raise RuntimeError(f"{len(messages)} events recorded, not {n}")
        peer_name = "httpx_one_at_a_time" if ordered else f"httpx_batches_of_{batch}"
        say(f"{peer_name}: {n} POSTs of the same bodies, {batch} at a time")
        peer = self.post_directly(peer_name, f"{mode}-peer", place.secret, messages, batch)
        say(f"worker_{mode}: one dealbase worker delivers the {n} events")
        mine = self.deliver(f"worker_{mode}", mode, messages, ordered)
        mine.compare_to = peer.name
        if peer.events_per_second and not mine.failure and not peer.failure:
            mine.ratio = mine.events_per_second / peer.events_per_second
        return [peer, mine]

    def post_directly(
        self, name: str, tag: str, secret: str, messages: list[tuple[str, bytes]], batch: int
    ) -> Throughput:
        """The messages POSTed as the worker sends them, without the database: `batch` at once
        (gathered), the next batch once all of them are answered."""
        url = self.receiver.url(tag)
        errors: list[str] = []

        async def post_all() -> float:
            limits = httpx.Limits(max_connections=100)  # as the worker's Sender
            async with httpx.AsyncClient(limits=limits, trust_env=False, timeout=10.0) as client:

                async def post(message_id: str, body: bytes) -> None:
                    response = await client.post(
                        url, content=body, headers=signed_headers(secret, message_id, body)
                    )
                    if response.status_code != 204:
                        errors.append(f"{response.status_code} for {message_id}")

                started = time.monotonic()
                for first in range(0, len(messages), batch):
                    chunk = messages[first : first + batch]
                    await asyncio.gather(*(post(message_id, body) for message_id, body in chunk))
                return started

        receiver_cpu = cpu_seconds(self.receiver.pid)
        cpu = time.process_time()
        started = asyncio.run(post_all())
        cpu = time.process_time() - cpu
        receiver_used = _used(receiver_cpu, cpu_seconds(self.receiver.pid))
        row = Throughput(
            name, f"httpx.AsyncClient, batches of {batch}", len(messages), sender_cpu_us=0
        )
        self._arrived(row, tag, messages, started, ordered=batch == 1)
        row.sender_cpu_us = cpu / len(messages) * 1e6
        row.receiver_cpu_us = _per_event(receiver_used, len(messages))
        if errors and not row.failure:
            row.failure = f"{len(errors)} POSTs failed, the first: {errors[0]}"
        self._say(row)
        return row

    def deliver(
        self, name: str, tag: str, messages: list[tuple[str, bytes]], ordered: bool
    ) -> Throughput:
        n = len(messages)
        row = Throughput(
            name,
            f"dealbase worker, {'ordered' if ordered else 'ordered: false'} endpoint",
            n,
        )
        worker = self.worker(name)
        recording = None
        try:
            started = worker.wait_ready()
            worker_cpu = cpu_seconds(worker.pid)
            receiver_cpu = cpu_seconds(self.receiver.pid)
            if self.py_spy:
                speedscope = (
                    RESULTS / f"{self.options.stamp}-profile-webhooks-{name}.speedscope.json"
                )
                recording = start_recording(
                    self.py_spy,
                    worker.pid,
                    speedscope,
                    self.logs / f"py-spy-{name}.log",
                    gil_only=True,
                )
            complete = self.receiver.wait_for(tag, n)
            worker_used = _used(worker_cpu, cpu_seconds(worker.pid))
            database_used = backends_cpu(self.observer, worker.pid)
            receiver_used = _used(receiver_cpu, cpu_seconds(self.receiver.pid))
        finally:
            if recording is not None:
                stop_recording(recording)
            worker.stop()
        self._arrived(row, tag, messages, started, ordered=ordered)
        row.sender_cpu_us = _per_event(worker_used, n)
        row.database_cpu_us = _per_event(database_used, n)
        row.receiver_cpu_us = _per_event(receiver_used, n)
        if not complete and not row.failure:
            row.failure = f"nothing new arrived for {STALL_SECONDS:.0f} s"
        problems = worker.failures()
        if problems and not row.failure:
            row.failure = f"the worker logged failures:\n{problems}"
        if recording is not None:
            row.profile = self._summarize(recording.output, row)
        self._say(row)
        return row

    def _arrived(
        self,
        row: Throughput,
        tag: str,
        messages: list[tuple[str, bytes]],
        started: float,
        *,
        ordered: bool,
    ) -> None:
        arrivals = self.receiver.arrivals(tag)
        expected = [message_id for message_id, _ in messages]
        seen = {arrival.message_id for arrival in arrivals}
        row.requests, row.distinct = len(arrivals), len(seen)
        row.missing = len(set(expected) - seen)
        if arrivals:
            last = max(arrival.monotonic for arrival in arrivals)
            first = min(arrival.monotonic for arrival in arrivals)
            row.seconds = last - started
            row.first_to_last_seconds = last - first
            row.events_per_second = row.distinct / row.seconds if row.seconds > 0 else 0.0
        if ordered:
            firsts: dict[str, float] = {}
            for arrival in sorted(arrivals, key=lambda arrival: arrival.monotonic):
                firsts.setdefault(arrival.message_id, arrival.monotonic)
            row.in_order = sorted(firsts, key=firsts.__getitem__) == expected
        if row.missing:
            row.failure = f"LOST {row.missing} of {row.events} events: they never arrived"
        elif seen - set(expected):
            row.failure = f"{len(seen - set(expected))} webhook-ids arrived that no event has"
        elif row.in_order is False:
            row.failure = "the ordered endpoint's events arrived out of commit order"

    def _summarize(self, speedscope: Path, row: Throughput) -> str:
        summary = speedscope.with_name(speedscope.name.replace(".speedscope.json", ".txt"))
        heading = (
            f"py-spy profile (GIL) of dealbase worker, {row.name}: {row.events} events,"
            f" {row.events_per_second:,.0f} events/s under the profiler\n"
            f"speedscope file: {speedscope.relative_to(ROOT)}\n\n"
        )
        summary.write_text(heading + summarize(speedscope))
        return str(summary.relative_to(ROOT))

    @staticmethod
    def _say(row: Throughput) -> None:
        if row.failure:
            print(f"\nbench: webhooks: FAILED {row.name}: {row.failure}\n", file=sys.stderr)
            return
        say(
            f"{row.name}: {row.events_per_second:,.0f} events/s ({row.distinct} events in"
            f" {row.seconds:.2f} s), {number(row.sender_cpu_us)} µs CPU/event"
        )

    # Delay --------------------------------------------------------------------------------------

    def delay(self) -> list[Delay]:
        """The peer at the rate; then a worker at the rate, to an ordered endpoint (one
        delivery per step) and to an `ordered: false` one, and at a tenth of the rate (sparse
        traffic, where the worker finds nothing between events and sleeps its poll interval)."""
        rate, seconds = self.options.rate, self.options.delay_seconds
        sparse = max(1, rate // 10)
        n = rate * seconds
        say(f"direct_post_after_commit: {n} commits at {rate}/s, each POSTed by the client itself")
        peer = self.commit_and_post(new_place(self.database, "webhooks direct"), rate, n)
        self._say_delay(peer)
        rows = [peer]
        runs = [(rate, True), (rate, False), (sparse, True)]
        for each, ordered in dict.fromkeys(runs):
            mine = self.worker_delay(each, each * seconds, ordered=ordered)
            mine.compare_to = peer.name
            if peer.p50_ms and not mine.failure and not peer.failure:
                mine.ratio = mine.p50_ms / peer.p50_ms
            rows.append(mine)
        return rows

    def worker_delay(self, rate: int, n: int, *, ordered: bool) -> Delay:
        mode = "ordered" if ordered else "unordered"
        name, tag = f"worker_delay_{mode}_{rate}_per_s", f"delay-{mode}-{rate}"
        place = new_place(self.database, f"webhooks delay {mode} {rate}")
        place = add_endpoint(self.database, place, self.receiver.url(tag), ordered=ordered)
        worker = self.worker(name)
        mine = Delay(name, f"{n} commits at {rate}/s to an {mode} endpoint, worker idle before", n)
        say(f"{name}: {n} commits at {rate}/s while one dealbase worker runs")
        try:
            worker.wait_ready()
            time.sleep(POLL_INTERVAL_S * 2)  # idle: past its first visits and polls
            worker_cpu = cpu_seconds(worker.pid)
            commits, mine.committed_per_second = self.commit(place, rate, n, tag)
            complete = self.receiver.wait_for(tag, n)
            worker_used = _used(worker_cpu, cpu_seconds(worker.pid))
            database_used = backends_cpu(self.observer, worker.pid)
        finally:
            worker.stop()
        self._delays(mine, tag, commits)
        mine.sender_cpu_us = _per_event(worker_used, n)
        mine.database_cpu_us = _per_event(database_used, n)
        if not complete and not mine.failure:
            mine.failure = f"nothing new arrived for {STALL_SECONDS:.0f} s"
        problems = worker.failures()
        if problems and not mine.failure:
            mine.failure = f"the worker logged failures:\n{problems}"
        self._say_delay(mine)
        return mine

    @staticmethod
    def _say_delay(row: Delay) -> None:
        if row.failure:
            print(f"\nbench: webhooks: FAILED {row.name}: {row.failure}\n", file=sys.stderr)
        else:
            say(
                f"{row.name}: delay p50 {row.p50_ms:,.1f} ms, p99 {row.p99_ms:,.1f} ms,"
                f" max {row.max_ms:,.1f} ms ({row.received} events)"
            )

    def commit(
        self, place: Place, rate: int, n: int, tag: str, post: httpx.Client | None = None
    ) -> tuple[dict[str, float], float]:
        """`n` units of work of one customer each, `rate` a second; when each commit returned
        (by customer id), and the rate achieved. With `post`, each event's customer is then
        POSTed to the receiver's `tag` at once."""
        commits: dict[str, float] = {}
        interval = 1.0 / rate
        url = self.receiver.url(tag)
        started = time.monotonic()
        for index in range(n):
            pause = started + index * interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            with self.database.unit_of_work(place.scope) as uow:
                made = customers.create(uow, customer(index))
            committed = time.monotonic()
            commits[str(made.id)] = committed
            if post is not None:
                body = orjson.dumps({"type": "customer.created", "data": customer_json(made)})
                headers = signed_headers(place.secret, str(made.id), body)
                post.post(url, content=body, headers=headers)
        return commits, n / (time.monotonic() - started)

    def commit_and_post(self, place: Place, rate: int, n: int) -> Delay:
        row = Delay("direct_post_after_commit", f"{n} commits, each POSTed by httpx.Client", n)
        place = replace(place, secret=endpoints.new_secret())
        with httpx.Client(trust_env=False, timeout=10.0) as client:
            commits, row.committed_per_second = self.commit(place, rate, n, "direct", client)
        complete = self.receiver.wait_for("direct", n)
        self._delays(row, "direct", commits)
        if not complete and not row.failure:
            row.failure = f"nothing new arrived for {STALL_SECONDS:.0f} s"
        return row

    def _delays(self, row: Delay, tag: str, commits: dict[str, float]) -> None:
        delays: list[float] = []
        created: list[float] = []
        seen: set[str] = set()
        for arrival in self.receiver.arrivals(tag):
            body = orjson.loads(arrival.body)
            customer_id = body["data"]["id"]
            if customer_id in seen or customer_id not in commits:
                continue
            seen.add(customer_id)
            delays.append((arrival.monotonic - commits[customer_id]) * 1000)
            if "created_at" in body:
                at = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
                created.append((arrival.wall - at.timestamp()) * 1000)
        row.received = len(seen)
        row.missing = len(set(commits) - seen)
        if row.missing:
            row.failure = f"LOST {row.missing} of {row.events} events: they never arrived"
        if not delays:
            return
        ordered = sorted(delays)
        row.p50_ms = percentile(ordered, 0.50)
        row.p90_ms = percentile(ordered, 0.90)
        row.p99_ms = percentile(ordered, 0.99)
        row.max_ms = ordered[-1]
        row.mean_ms = statistics.fmean(ordered)
        if created:
            created.sort()
            row.created_p50_ms = percentile(created, 0.50)
            row.created_p99_ms = percentile(created, 0.99)


def _used(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _per_event(seconds: float | None, events: int) -> float | None:
    return None if seconds is None or not events else seconds / events * 1e6


def measure(options: Options) -> Report:
    """Every part of the run, on a scratch database dropped after (also on an error)."""
    report = Report(
        settings={
            "events": options.events,
            "rate": options.rate,
            "delay_seconds": options.delay_seconds,
            "deliveries_per_step": options.deliveries_per_step,
            "poll_interval_s": options.poll_interval or POLL_INTERVAL_S,
            "parts": list(options.parts),
            "profile": options.profile,
        },
        load_average={"before": load_average()},
    )
    with ExitStack() as stack:
        bench = Bench(options, stack)
        if {"throughput", "ordered"} & set(options.parts):
            report.throughput += bench.throughput(ordered=True)
        if {"throughput", "unordered"} & set(options.parts):
            report.throughput += bench.throughput(ordered=False)
        if "delay" in options.parts:
            report.delay += bench.delay()
    report.load_average["after"] = load_average()
    return report


def main() -> int:
    parser = arguments_parser(__doc__)
    commands = parser.add_subparsers(dest="command")
    receiver = commands.add_parser("receive", help="(internal) the receiver's process")
    receiver.add_argument("--port", type=int, required=True)
    worker = commands.add_parser("worker", help="(an experiment) the worker, another poll interval")
    worker.add_argument("--deliveries-per-step", type=int, default=DEFAULT_STEP)
    worker.add_argument("--poll-interval", type=float, required=True)
    parser.add_argument(
        "--server",
        default=os.environ.get("DEALBASE_BENCH_DATABASE_URL") or DEFAULT_SERVER,
        help="any database on the PostgreSQL server; a scratch one is made and dropped there",
    )
    parser.add_argument("--events", type=int, default=5000, help="events per throughput run")
    parser.add_argument("--rate", type=int, default=50, help="commits a second, delay part")
    parser.add_argument("--delay-seconds", type=int, default=10, help="seconds of commits")
    parser.add_argument("--deliveries-per-step", type=int, default=DEFAULT_STEP)
    parser.add_argument(
        "--parts",
        default="throughput,delay",
        help="throughput (ordered and unordered), ordered, unordered, delay; default: all",
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy (GIL samples) on each throughput worker"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        help=f"an experiment: run the worker with this poll interval (s), not {POLL_INTERVAL_S:g}",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args()
    if arguments.command == "receive":
        receive(arguments.port)
        return 0
    if arguments.command == "worker":
        run_worker(arguments.deliveries_per_step, arguments.poll_interval)
        return 0
    run = stamp()
    parts = tuple(part.strip() for part in arguments.parts.split(",") if part.strip())
    options = Options(
        server=arguments.server,
        events=arguments.events,
        rate=arguments.rate,
        delay_seconds=arguments.delay_seconds,
        logs=RESULTS / f"{run}-logs",
        stamp=run,
        deliveries_per_step=arguments.deliveries_per_step,
        parts=parts,
        profile=arguments.profile,
        poll_interval=arguments.poll_interval,
    )
    return run_alone("webhooks", lambda: measure(options), tables, arguments.json)


if __name__ == "__main__":
    sys.exit(main())
