"""Live subscriptions under writes: N `changes` subscriptions on one department (1,000 by
default) while POST /customers arrives at a steady rate; the delay from each write's commit to
each subscriber's receipt, and the server's CPU per event delivered beside its CPU per write
without subscribers, measured in the same run.

    .venv/bin/python bench/live.py                     # BENCH_LIVE_SUBSCRIBERS, BENCH_SECONDS, ...
    .venv/bin/python bench/live.py --profile           # py-spy on the server during the live run

`make bench` runs it after the other scenarios (`BENCH_SCENARIOS=live` runs it alone), on a
scratch database of its own and a `dealbase serve --workers BENCH_WORKERS` of its own, every
production feature on (keys, rate limits in Redis, JSON logs at info), with
DEALBASE_LIVE_CONNECTIONS_PER_KEY and the caps on WebSockets not yet introduced
(DEALBASE_LIVE_UNINTRODUCED_PER_ADDRESS, _PER_PROCESS) raised to the subscribers' number: every
subscriber uses the run's one department key and comes from one address, and the limits count
per server process.

The subscribers: one process of their own (`live.py subscribe`, asyncio on uvloop), each
subscriber a WebSocket at /graphql speaking graphql-transport-ws (the dashboards' transport),
one `changes` subscription each. Its WebSocket client is a small one of its own (the upgrade,
masked frames out, unmasked frames in, permessage-deflate when BENCH_LIVE_DEFLATE=1 as browsers
offer it): a thousand sockets at fifty events a second each are 50,000 messages a second, and a
general client library's cost per message would take the cores the server needs, delaying the
receipts it is to measure. Each arrival is timed (time.monotonic, the machine's one clock) as its
bytes are read, before it is parsed.

The writer: this process, open loop: a POST /customers in the department every 1/rate s from a
fixed start, each sent whether or not the ones before were answered (httpx.AsyncClient), for
BENCH_SECONDS. Each write is timed when it is sent (before its COMMIT, which happens inside the
request) and when its answer arrives (after the COMMIT). A subscriber's receipt is matched to
its write by the customer's id (`recordId`). Delays are reported from both clock readings: from
the send (at or before the commit: an upper bound of commit-to-receipt, the one held to the
target) and from the answer (after the commit: a lower bound, which may be negative when a
subscriber hears of a write before its writer does).

Phases: (1) the same writes with no subscriber (the server's CPU per write, the baseline);
(2) the subscribers connect and subscribe, and warm-up writes go until every one of them has
received one (each subscription is then live); (3) the measured writes. The CPU of the server's
process tree, the scratch database's backends and Redis is read over each measured window
(harness/cpu.py), from the first write to the last event delivered; the subscribers' process's
and this one's too. Every subscriber must receive every measured write exactly once, and all
in the same order: a write lost, received twice, or a subscription closed or failed fails the
run (exit 1, FAILED in the table).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import statistics
import subprocess
import sys
import time
import zlib
from array import array
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
from harness.console import arguments_parser, sayer
from harness.cpu import CpuUse
from harness.figures import number, percentile
from harness.paths import RESULTS, ROOT
from harness.proc import cpu_seconds
from harness.processes import Service, ServiceFailed
from harness.profiling import start_recording, stop_recording, summarize
from harness.settings import BenchSettings
from harness.stack import REST_PREFIX, Tenant, provision, scratch_database, start_dealbase
from harness.standalone import PartsReport, run_alone, stamp
from harness.tools import ensure_py_spy, load_average

THIS = Path(__file__).resolve()
# What a dashboard's feed selects (docs/graphql.md's example).
CHANGES = (
    "subscription Changes { changes { cursor type resource kind recordId departmentId"
    " record changedFields previous occurredAt } }"
)
NEXT = b'{"id":"changes","type":"next"'
ERRORS = b'"errors":'
RECORD_ID = b'"recordId":"'
# Handshakes in flight at once while the subscribers connect.
OPENING_AT_ONCE = 100
# Subscribers that are not all connected and acknowledged by then fail the run.
CONNECT_SECONDS = 120.0
# Warm-up writes (a second apart at most) until every subscriber has one, for at most this long.
WARMUP_SECONDS = 60.0
WARMUP_RATE = 10
# After the last write, a delivery that brought nothing new for this long has lost the rest.
STALL_SECONDS = 30.0
# After every expected event arrived: a little longer, for a duplicate to show.
SETTLE_SECONDS = 1.0


say = sayer("bench: live")


# --- the subscribers' process ------------------------------------------------------------------


def _frame(payload: bytes, opcode: int = 1) -> bytes:
    """A client's frame (FIN, masked, as RFC 6455 requires of clients)."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    elif size < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + size.to_bytes(8, "big")
    repeated = (mask * (size // 4 + 1))[:size]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        size, "big"
    )
    return head + mask + masked


class _Tally:
    """What the subscribers received: per arrival, the subscriber, the record's id (an index
    into ``ids``) and when its bytes were read."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.acknowledged = 0
        self.connect_failures: Counter[str] = Counter()
        self.closes: Counter[str] = Counter()
        self.errors: list[str] = []
        self.index_of: dict[str, int] = {}
        self.ids: list[str] = []
        self.who = array("i")
        self.what = array("i")
        self.when = array("d")
        self.per_subscriber = [0] * count
        self.messages = 0

    def arrived(self, subscriber: int, record_id: str, at: float) -> None:
        index = self.index_of.get(record_id)
        if index is None:
            index = self.index_of[record_id] = len(self.ids)
            self.ids.append(record_id)
        self.who.append(subscriber)
        self.what.append(index)
        self.when.append(at)
        self.per_subscriber[subscriber] += 1

    def error(self, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(text)

    def status(self) -> dict[str, Any]:
        return {
            "acknowledged": self.acknowledged,
            "connect_failures": dict(self.connect_failures),
            "closes": dict(self.closes),
            "errors": self.errors,
            "received": len(self.when),
            "least_received": min(self.per_subscriber) if self.per_subscriber else 0,
            "cpu_seconds": time.process_time(),
        }

    def dump(self, path: Path) -> None:
        path.write_bytes(
            orjson.dumps(
                {
                    "ids": self.ids,
                    "who": self.who.tolist(),
                    "what": self.what.tolist(),
                    "when": self.when.tolist(),
                }
            )
        )


class _Subscriber(asyncio.Protocol):
    """One WebSocket and its one subscription."""

    def __init__(
        self,
        tally: _Tally,
        index: int,
        host: str,
        port: int,
        credentials: dict[str, str],
        deflate: bool,
        acknowledged: asyncio.Future[None],
    ) -> None:
        self.tally = tally
        self.index = index
        self.host = host
        self.port = port
        self.credentials = credentials
        self.offer_deflate = deflate
        self.acknowledged = acknowledged
        # uvloop's transport is a stream transport without deriving from asyncio.Transport.
        self.transport: Any = None
        self.buffer = bytearray()
        self.upgraded = False
        self.inflater: Any = None
        self.fragments: list[bytes] = []
        self.compressed = False
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            "GET /graphql HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Protocol: graphql-transport-ws",
        ]
        if self.offer_deflate:
            lines.append("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
        transport.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    def send(self, message: dict[str, Any]) -> None:
        if not self.closed:
            self.transport.write(_frame(orjson.dumps(message)))

    def data_received(self, data: bytes) -> None:
        # Before anything else: the moment the bytes were read.
        at = time.monotonic()
        if self.buffer:
            self.buffer += data
            data = bytes(self.buffer)
            self.buffer.clear()
        if not self.upgraded:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self.buffer += data
                return
            head = data[:end].decode("latin-1")
            data = data[end + 4 :]
            if not head.startswith("HTTP/1.1 101"):
                self._failed(f"upgrade refused: {head.splitlines()[0]}")
                return
            self.upgraded = True
            if "permessage-deflate" in head.lower():
                self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            self.send({"type": "connection_init", "payload": self.credentials})
        position = 0
        size = len(data)
        while size - position >= 2:
            first, second = data[position], data[position + 1]
            length = second & 0x7F
            start = position + 2
            if length == 126:
                if size - position < 4:
                    break
                length = int.from_bytes(data[start : start + 2], "big")
                start += 2
            elif length == 127:
                if size - position < 10:
                    break
                length = int.from_bytes(data[start : start + 8], "big")
                start += 8
            if size < start + length:
                break
            payload = data[start : start + length]
            position = start + length
            self._frame_received(first, payload, at)
            if self.closed:
                return
        if position < size:
            self.buffer += data[position:]

    def _frame_received(self, first: int, payload: bytes, at: float) -> None:
        opcode = first & 0x0F
        final = first & 0x80
        if opcode in (1, 2):
            self.fragments = [payload]
            self.compressed = bool(first & 0x40)
        elif opcode == 0:
            self.fragments.append(payload)
        elif opcode == 8:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            reason = payload[2:].decode(errors="replace")
            self.tally.closes[f"{code} {reason}"] += 1
            self._close(payload[:2])
            return
        elif opcode == 9:
            self.transport.write(_frame(payload, 0xA))
            return
        else:
            return
        if not final:
            return
        message = b"".join(self.fragments)
        self.fragments = []
        if self.compressed:
            message = self.inflater.decompress(message + b"\x00\x00\xff\xff")
        self._message(message, at)

    def _message(self, text: bytes, at: float) -> None:
        # The server's next messages start alike: the record's id is read from its place,
        # without parsing the kilobyte around it (the subscribers share the cores measured).
        if text.startswith(NEXT) and ERRORS not in text:
            found = text.find(RECORD_ID)
            if found > 0:
                start = found + len(RECORD_ID)
                self.tally.arrived(self.index, text[start : start + 36].decode(), at)
                return
        message = orjson.loads(text)
        kind = message.get("type")
        if kind == "next":
            payload = message["payload"]
            if payload.get("errors"):
                self.tally.error(orjson.dumps(payload["errors"]).decode()[:500])
                return
            self.tally.arrived(self.index, payload["data"]["changes"]["recordId"], at)
        elif kind == "ping":
            self.send({"type": "pong"})
        elif kind == "connection_ack":
            self.tally.acknowledged += 1
            self.send({"id": "changes", "type": "subscribe", "payload": {"query": CHANGES}})
            if not self.acknowledged.done():
                self.acknowledged.set_result(None)
        elif kind != "pong":
            self.tally.error(f"subscriber {self.index}: {orjson.dumps(message).decode()[:500]}")

    def _failed(self, why: str) -> None:
        self.tally.error(f"subscriber {self.index}: {why}")
        if not self.acknowledged.done():
            self.acknowledged.set_exception(ConnectionError(why))
        self._close(b"")

    def _close(self, code: bytes) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self.transport.write(_frame(code, 0x8))
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.tally.closes[f"connection lost: {exc}"] += 1
        if not self.acknowledged.done():
            self.acknowledged.set_exception(ConnectionError(f"connection lost: {exc}"))


async def _subscribe_all(
    host: str, port: int, count: int, credentials: dict[str, str], deflate: bool
) -> None:
    """Opens the subscribers, then answers the bench's commands (a line each on stdin:
    `status`, `dump PATH`, `quit`) with a JSON line each on stdout."""
    loop = asyncio.get_running_loop()
    tally = _Tally(count)
    opening = asyncio.Semaphore(OPENING_AT_ONCE)
    sockets: list[_Subscriber] = []

    async def open_one(index: int) -> None:
        async with opening:
            acknowledged: asyncio.Future[None] = loop.create_future()
            try:
                _, subscriber = await loop.create_connection(
                    lambda: _Subscriber(
                        tally, index, host, port, credentials, deflate, acknowledged
                    ),
                    host,
                    port,
                )
                sockets.append(subscriber)
                await asyncio.wait_for(acknowledged, CONNECT_SECONDS)
            except (OSError, TimeoutError) as exc:
                tally.connect_failures[f"{type(exc).__name__}: {exc}"[:200]] += 1

    opened = [loop.create_task(open_one(index)) for index in range(count)]
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        command, _, argument = line.partition(" ")
        if command == "status":
            answer: dict[str, Any] = tally.status()
        elif command == "dump":
            tally.dump(Path(argument))
            answer = {"dumped": argument}
        elif command == "quit":
            break
        else:
            answer = {"error": f"unknown command {command!r}"}
        sys.stdout.write(orjson.dumps(answer).decode() + "\n")
        sys.stdout.flush()
    for task in opened:
        task.cancel()
    for subscriber in sockets:
        subscriber._close((1000).to_bytes(2, "big"))
    await asyncio.sleep(0.2)


def subscribe(arguments: argparse.Namespace) -> None:
    """`live.py subscribe ...`: the subscribers' process."""
    import uvloop

    credentials = {"X-Api-Key": os.environ["BENCH_LIVE_API_KEY"]}
    if arguments.department:
        credentials["X-Department-Id"] = arguments.department
    uvloop.run(
        _subscribe_all(
            arguments.host, arguments.port, arguments.count, credentials, arguments.deflate
        )
    )


class Subscribers:
    """The subscribers' process, and what the bench asks it."""

    def __init__(
        self, server: Service, tenant: Tenant, count: int, deflate: bool, log_path: Path
    ) -> None:
        command = [
            sys.executable,
            str(THIS),
            "subscribe",
            "--host",
            "127.0.0.1",
            "--port",
            str(server.port),
            "--count",
            str(count),
            "--department",
            tenant.department_id,
            *(["--deflate"] if deflate else []),
        ]
        self.count = count
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            env={**os.environ, "BENCH_LIVE_API_KEY": tenant.api_key},
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        try:
            self.process.stdin.write(command.encode() + b"\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = b""
        if not line:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise ServiceFailed(f"the subscribers' process ended; its log:\n{tail}")
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    def status(self) -> dict[str, Any]:
        return self.ask("status")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError, ServiceFailed, ValueError):
                assert self.process.stdin is not None
                self.process.stdin.write(b"quit\n")
                self.process.stdin.flush()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


# --- the writer ---------------------------------------------------------------------------------


@dataclass
class Writes:
    """The writes of one phase: for each customer made, when it was sent and answered."""

    sent: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    late_ms: float = 0.0  # the latest a send left after its planned moment
    seconds: float = 0.0  # from the first send to the last answer

    @property
    def count(self) -> int:
        return len(self.sent)


def write(base_url: str, tenant: Tenant, rate: int, count: int, label: str) -> Writes:
    """`count` POST /customers, one every 1/rate s from a fixed start, each sent on time
    whether the ones before were answered or not (an open loop)."""
    writes = Writes()

    async def post(client: httpx.AsyncClient, index: int) -> None:
        body = {
            "last_name": f"Live {label} {index}",
            "first_name": "Ada",
            "email": f"ada.{label}.{index}@example.com",
        }
        sent = time.monotonic()
        try:
            response = await client.post(f"{REST_PREFIX}/customers", json=body)
        except httpx.HTTPError as exc:
            writes.failures.append(f"{type(exc).__name__}: {exc}")
            return
        answered = time.monotonic()
        if response.status_code != 201:
            writes.failures.append(f"{response.status_code}: {response.text[:300]}")
            return
        made = response.json()["id"]
        writes.sent[made] = sent
        writes.answered[made] = answered

    async def run() -> None:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(
            base_url=base_url, headers=tenant.headers, limits=limits, timeout=60.0, trust_env=False
        ) as client:
            started = time.monotonic()
            posts = []
            for index in range(count):
                planned = started + index / rate
                pause = planned - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                writes.late_ms = max(writes.late_ms, (time.monotonic() - planned) * 1000)
                posts.append(asyncio.create_task(post(client, index)))
            await asyncio.gather(*posts)
            writes.seconds = time.monotonic() - started

    asyncio.run(run())
    return writes


# --- figures ------------------------------------------------------------------------------------


@dataclass
class Phase:
    """One measured phase: the writes, and (with subscribers) their deliveries."""

    name: str
    subscribers: int
    writes: int = 0
    write_failures: int = 0
    writes_per_second: float = 0.0
    write_p50_ms: float = 0.0
    write_p99_ms: float = 0.0
    late_send_ms: float = 0.0
    window_seconds: float = 0.0
    # Microseconds of CPU per write, by party (server, postgres, redis, subscribers, writer).
    cpu_us_per_write: dict[str, float] = field(default_factory=dict)
    # The same per event delivered (writes x subscribers), for a phase with subscribers.
    cpu_us_per_event: dict[str, float] = field(default_factory=dict)
    # Deliveries: (write, subscriber) pairs expected and received.
    expected: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order_subscribers: int = 0
    # Commit-to-receipt delay over every (write, subscriber) pair, from the send and from the
    # answer, in ms; and per write, the last subscriber's delay from the send.
    from_sent: dict[str, float] = field(default_factory=dict)
    from_answer: dict[str, float] = field(default_factory=dict)
    last_subscriber_from_sent: dict[str, float] = field(default_factory=dict)
    closes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # The subscribers' connections each server worker accepted (the kernel chooses).
    per_worker: list[int] = field(default_factory=list)
    # Per write, in the order sent: seconds from the first send, and its first and last
    # subscriber's delay from its send in ms (where a stall of the server shows).
    timeline: list[tuple[float, float, float]] = field(default_factory=list)
    profile: str | None = None
    failure: str | None = None


def _spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 0.50),
        "p90": percentile(ordered, 0.90),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1],
        "min": ordered[0],
        "mean": statistics.fmean(ordered),
    }


def _write_figures(phase: Phase, writes: Writes) -> None:
    phase.writes = writes.count
    phase.write_failures = len(writes.failures)
    phase.late_send_ms = writes.late_ms
    latencies = sorted((writes.answered[k] - writes.sent[k]) * 1000 for k in writes.sent)
    if latencies:
        phase.write_p50_ms = percentile(latencies, 0.5)
        phase.write_p99_ms = percentile(latencies, 0.99)
    if writes.seconds:
        phase.writes_per_second = writes.count / writes.seconds
    if writes.failures:
        phase.failure = f"{len(writes.failures)} writes failed, the first: {writes.failures[0]}"


def _deliveries(phase: Phase, writes: Writes, dump: dict[str, Any], subscribers: int) -> None:
    """Each subscriber's arrivals against the writes: each write exactly once, all in the
    same order."""
    ids: list[str] = dump["ids"]
    measured = [ids[index] in writes.sent for index in range(len(ids))]
    counts: Counter[tuple[int, int]] = Counter()
    sequences: list[list[int]] = [[] for _ in range(subscribers)]
    from_sent: list[float] = []
    from_answer: list[float] = []
    last: dict[int, float] = {}
    first: dict[int, float] = {}
    for who, what, when in zip(dump["who"], dump["what"], dump["when"], strict=True):
        if not measured[what]:
            continue
        counts[(who, what)] += 1
        if counts[(who, what)] > 1:
            continue
        sequences[who].append(what)
        record = ids[what]
        delay = (when - writes.sent[record]) * 1000
        from_sent.append(delay)
        from_answer.append((when - writes.answered[record]) * 1000)
        if delay > last.get(what, float("-inf")):
            last[what] = delay
        if delay < first.get(what, float("inf")):
            first[what] = delay
    phase.expected = writes.count * subscribers
    phase.delivered = len(counts)
    phase.duplicated = sum(n - 1 for n in counts.values())
    phase.lost = phase.expected - phase.delivered
    common = Counter(tuple(sequence) for sequence in sequences).most_common(1)
    if common:
        phase.out_of_order_subscribers = sum(
            1
            for sequence in sequences
            if tuple(sequence) != common[0][0] and sorted(sequence) == sorted(common[0][0])
        )
    phase.from_sent = _spread(from_sent)
    phase.from_answer = _spread(from_answer)
    phase.last_subscriber_from_sent = _spread(list(last.values()))
    start = min(writes.sent.values(), default=0.0)
    index_of = {record: index for index, record in enumerate(ids)}
    phase.timeline = [
        (
            round(sent - start, 3),
            round(first.get(index_of.get(record, -1), -1.0), 1),
            round(last.get(index_of.get(record, -1), -1.0), 1),
        )
        for record, sent in sorted(writes.sent.items(), key=lambda item: item[1])
    ]
    problems = []
    if phase.lost:
        problems.append(
            f"LOST {phase.lost:,} of {phase.expected:,} deliveries (write x subscriber)"
        )
    if phase.duplicated:
        problems.append(f"{phase.duplicated:,} deliveries arrived TWICE or more")
    if phase.out_of_order_subscribers:
        problems.append(
            f"{phase.out_of_order_subscribers} subscribers got the writes in another order"
        )
    if problems and not phase.failure:
        phase.failure = "; ".join(problems)


@dataclass
class Report(PartsReport):
    phases: list[Phase] = field(default_factory=list)
    target_p99_ms: float = 250.0

    def parts(self) -> dict[str, list[Any]]:
        return {"phases": self.phases}

    def more(self) -> dict[str, Any]:
        return {"target": self.target()}

    def live(self) -> Phase | None:
        return next((phase for phase in self.phases if phase.subscribers), None)

    def target(self) -> dict[str, Any]:
        live = self.live()
        p99 = live.from_sent.get("p99") if live else None
        # A phase that failed (a write refused, an event lost) misses it whatever its p99.
        met = None if p99 is None or live is None else p99 < self.target_p99_ms and not live.failure
        return {
            "label": f"commit-to-subscriber delay p99 < {self.target_p99_ms:.0f} ms"
            f" with {live.subscribers if live else '?'} subscribers on one department",
            "p99_ms_from_sent": p99,
            "met": met,
        }


def tables(report: Report) -> str:
    lines = [
        "| live subscriptions | subscribers | writes (per s) | write p50 / p99 ms |"
        " server CPU µs/write | PostgreSQL µs/write | server CPU µs/event delivered |"
        " subscribers' CPU µs/event | delivered | lost | twice |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in report.phases:
        per_event = phase.cpu_us_per_event
        lines.append(
            f"| {phase.name}{' (FAILED)' if phase.failure else ''} | {phase.subscribers:,} |"
            f" {phase.writes:,} ({phase.writes_per_second:,.1f}) |"
            f" {phase.write_p50_ms:,.1f} / {phase.write_p99_ms:,.1f} |"
            f" {number(phase.cpu_us_per_write.get('server'))} |"
            f" {number(phase.cpu_us_per_write.get('postgres'))} |"
            f" {number(per_event.get('server'), 1) if per_event else '—'} |"
            f" {number(per_event.get('subscribers'), 1) if per_event else '—'} |"
            f" {phase.delivered:,} of {phase.expected:,} | {phase.lost:,} | {phase.duplicated:,} |"
        )
    for phase in report.phases:
        if phase.per_worker:
            lines.append(
                f"\n{phase.name}: the subscribers' connections by server worker:"
                f" {' + '.join(f'{count:,}' for count in phase.per_worker)}"
            )
    live = report.live()
    baseline = next((phase for phase in report.phases if not phase.subscribers), None)
    if live and live.from_sent:
        lines += [
            "",
            "| commit-to-subscriber delay, ms | p50 | p90 | p99 | max | min |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        rows = (
            ("from the write's send (at or before its COMMIT)", live.from_sent),
            ("from the write's answer (after its COMMIT)", live.from_answer),
            ("per write, its last subscriber, from the send", live.last_subscriber_from_sent),
        )
        for label, spread in rows:
            lines.append(
                f"| {label} | {number(spread.get('p50'), 1)} | {number(spread.get('p90'), 1)} |"
                f" {number(spread.get('p99'), 1)} | {number(spread.get('max'), 1)} |"
                f" {number(spread.get('min'), 1)} |"
            )
    if live and baseline:
        server_live = live.cpu_us_per_write.get("server")
        server_base = baseline.cpu_us_per_write.get("server")
        if server_live and server_base and live.subscribers:
            extra = (server_live - server_base) / live.subscribers
            lines.append(
                f"\nserver CPU per write: {server_live:,.0f} µs with {live.subscribers:,}"
                f" subscribers, {server_base:,.0f} µs with none ({server_live / server_base:,.1f}"
                f" x); the subscribers' share, per event delivered: {extra:,.1f} µs"
            )
    target = report.target()
    verdict = {True: "met", False: "MISSED", None: "no figure"}[target["met"]]
    lines.append(
        f"target: {target['label']}: {verdict} ({number(target['p99_ms_from_sent'], 1)} ms)"
    )
    loads = report.load_average
    lines.append(
        f"load average (1, 5, 15 min): {loads.get('before')} before, {loads.get('after')} after"
    )
    for phase in report.phases:
        if phase.profile:
            lines.append(f"py-spy profile of {phase.name}: {phase.profile}")
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    settings: BenchSettings
    logs: Path
    stamp: str
    profile: bool = False


def _connections_per_worker(server: Service) -> list[int]:
    """Established connections to the server's port, by worker process."""
    import psutil

    counts = []
    for worker in psutil.Process(server.pid).children(recursive=True):
        try:
            connections = worker.net_connections(kind="tcp")
        except psutil.Error:
            continue
        on_port = [c for c in connections if c.laddr and c.laddr.port == server.port]
        # The workers share the listening socket; other children (a resource tracker) do not.
        if any(connection.status == psutil.CONN_LISTEN for connection in on_port):
            counts.append(sum(1 for c in on_port if c.status == psutil.CONN_ESTABLISHED))
    return sorted(counts, reverse=True)


class Bench:
    """The scratch database, its tenant, dealbase serving it, and the phases in turn."""

    def __init__(self, options: Options, stack: ExitStack) -> None:
        self.options = options
        settings = options.settings
        self.settings = settings
        options.logs.mkdir(parents=True, exist_ok=True)
        self.database = stack.enter_context(scratch_database(settings.database_server))
        say(f"scratch database {self.database.rpartition('/')[2]}: migrating, one tenant")
        self.tenant = provision(self.database, employees=0, name="live")
        # Every subscriber holds the one key and comes from the one address: the limits per
        # key and per address (of WebSockets not yet introduced) are raised to let them all
        # connect to one process (the kernel spreads them over the workers unevenly).
        everyone = str(max(20, settings.live_subscribers))
        self.server, self.environment = start_dealbase(
            self.database,
            settings,
            options.logs / "dealbase-live.log",
            {
                "DEALBASE_LIVE_CONNECTIONS_PER_KEY": everyone,
                "DEALBASE_LIVE_UNINTRODUCED_PER_ADDRESS": everyone,
                "DEALBASE_LIVE_UNINTRODUCED_PER_PROCESS": everyone,
            },
        )
        stack.callback(self.server.stop)
        say(f"dealbase serving on {self.server.base_url} ({settings.workers} workers)")

    def _measured(
        self, phase: Phase, subscribers: Subscribers | None, label: str
    ) -> tuple[Writes, CpuUse, float]:
        """The phase's writes, and for subscribers their deliveries, under CpuUse."""
        settings = self.settings
        count = settings.live_rate * settings.seconds
        expected_total = 0
        if subscribers is not None:
            expected_total = subscribers.status()["received"] + count * subscribers.count
        client_before = cpu_seconds(subscribers.pid) if subscribers else None
        writer_before = time.process_time()
        started = time.monotonic()
        with CpuUse(self.server.pid, self.database) as cpu:
            writes = write(self.server.base_url, self.tenant, settings.live_rate, count, label)
            if subscribers is not None:
                self._wait_for(subscribers, expected_total)
        window = time.monotonic() - started
        writer_used = time.process_time() - writer_before
        client_used = None
        if subscribers is not None and client_before is not None:
            after = cpu_seconds(subscribers.pid)
            client_used = None if after is None else after - client_before
        _write_figures(phase, writes)
        phase.window_seconds = window
        used = dict(cpu.seconds)
        used["writer"] = writer_used
        if client_used is not None:
            used["subscribers"] = client_used
        used.pop("load", None)
        if writes.count:
            phase.cpu_us_per_write = {k: v * 1e6 / writes.count for k, v in used.items()}
        if subscribers is not None and writes.count:
            events = writes.count * subscribers.count
            phase.cpu_us_per_event = {k: v * 1e6 / events for k, v in used.items()}
        return writes, cpu, window

    def _wait_for(self, subscribers: Subscribers, total: int) -> None:
        """Until `total` arrivals, then SETTLE_SECONDS more; or until nothing new for
        STALL_SECONDS."""
        last, since = -1, time.monotonic()
        while True:
            received = subscribers.status()["received"]
            now = time.monotonic()
            if received >= total:
                time.sleep(SETTLE_SECONDS)
                return
            if received != last:
                last, since = received, now
            elif now - since > STALL_SECONDS:
                return
            time.sleep(0.05)

    def baseline(self) -> Phase:
        settings = self.settings
        count = settings.live_rate * settings.seconds
        phase = Phase("no_subscribers", 0)
        say(f"warm-up: {settings.live_rate} writes, no subscriber")
        warm = write(self.server.base_url, self.tenant, settings.live_rate, settings.live_rate, "w")
        if warm.failures:
            phase.failure = f"warm-up: {warm.failures[0]}"
            return phase
        say(f"{phase.name}: {count} POST /customers at {settings.live_rate}/s, no subscriber")
        self._measured(phase, None, "base")
        self._say(phase)
        return phase

    def live(self, stack: ExitStack) -> Phase:
        settings = self.settings
        n = settings.live_subscribers
        count = settings.live_rate * settings.seconds
        phase = Phase(f"subscribers_{n}", n)
        deflate = settings.live_deflate
        say(
            f"{n} subscribers connecting (graphql-transport-ws,"
            f" {'permessage-deflate' if deflate else 'no compression'})"
        )
        subscribers = Subscribers(
            self.server, self.tenant, n, deflate, self.options.logs / "live-subscribers.log"
        )
        stack.callback(subscribers.stop)
        deadline = time.monotonic() + CONNECT_SECONDS
        status = subscribers.status()
        while time.monotonic() < deadline:
            status = subscribers.status()
            failed = sum(status["connect_failures"].values())
            if status["acknowledged"] + failed >= n or status["closes"]:
                break
            time.sleep(0.2)
        if status["acknowledged"] < n:
            phase.failure = (
                f"{status['acknowledged']} of {n} subscribers acknowledged; failures:"
                f" {status['connect_failures']}, closes: {status['closes']},"
                f" errors: {status['errors'][:3]}"
            )
            return phase
        phase.per_worker = _connections_per_worker(self.server)
        say(
            f"{n} connected ({' + '.join(map(str, phase.per_worker))} by worker);"
            " warm-up writes until each subscriber has received one"
        )
        deadline = time.monotonic() + WARMUP_SECONDS
        index = 0
        while subscribers.status()["least_received"] == 0:
            if time.monotonic() > deadline:
                phase.failure = f"after {WARMUP_SECONDS:.0f} s some subscriber had received none"
                return phase
            warm = write(self.server.base_url, self.tenant, WARMUP_RATE, 2, f"lw{index}")
            index += 1
            if warm.failures:
                phase.failure = f"warm-up: {warm.failures[0]}"
                return phase
        time.sleep(2.0)
        recording = None
        if self.options.profile:
            speedscope = RESULTS / f"{self.options.stamp}-profile-live.speedscope.json"
            recording = start_recording(
                ensure_py_spy(),
                self.server.pid,
                speedscope,
                self.options.logs / "py-spy-live.log",
                gil_only=settings.profile_gil_only,
            )
        say(f"{phase.name}: {count} POST /customers at {settings.live_rate}/s to {n} subscribers")
        try:
            writes, _, _ = self._measured(phase, subscribers, "live")
        finally:
            if recording is not None:
                stop_recording(recording)
        dump_path = self.options.logs / "live-arrivals.json"
        subscribers.ask(f"dump {dump_path}")
        status = subscribers.status()
        phase.closes = status["closes"]
        phase.errors = status["errors"]
        _deliveries(phase, writes, orjson.loads(dump_path.read_bytes()), n)
        dump_path.unlink()
        if (phase.closes or phase.errors) and not phase.failure:
            phase.failure = f"closes {phase.closes}, errors {phase.errors[:3]}"
        if recording is not None:
            summary = recording.output.with_name(
                recording.output.name.replace(".speedscope.json", ".txt")
            )
            heading = (
                f"py-spy profile of dealbase serving {n} subscribers, {count} writes at"
                f" {settings.live_rate}/s ({self.options.stamp})\n"
                f"speedscope file: {recording.output.relative_to(ROOT)}\n\n"
            )
            summary.write_text(heading + summarize(recording.output))
            phase.profile = str(summary.relative_to(ROOT))
        self._say(phase)
        return phase

    @staticmethod
    def _say(phase: Phase) -> None:
        if phase.failure:
            print(f"\nbench: live: FAILED {phase.name}: {phase.failure}\n", file=sys.stderr)
            return
        text = (
            f"{phase.name}: {phase.writes} writes ({phase.writes_per_second:,.1f}/s), server"
            f" {number(phase.cpu_us_per_write.get('server'))} µs CPU/write"
        )
        if phase.subscribers:
            text += (
                f", {number(phase.cpu_us_per_event.get('server'), 1)} µs/event delivered; delay"
                f" from send p50 {phase.from_sent['p50']:,.1f} ms, p99"
                f" {phase.from_sent['p99']:,.1f} ms; {phase.lost} lost, {phase.duplicated} twice"
            )
        say(text)


def measure(options: Options) -> Report:
    settings = options.settings
    report = Report(
        settings={
            "subscribers": settings.live_subscribers,
            "rate": settings.live_rate,
            "seconds": settings.seconds,
            "workers": settings.workers,
            "deflate": settings.live_deflate,
            "transport": "graphql-transport-ws",
            "document": CHANGES,
            "profile": options.profile,
        },
        load_average={"before": load_average()},
    )
    with ExitStack() as stack:
        bench = Bench(options, stack)
        report.settings["dealbase_environment"] = {
            k: v for k, v in bench.environment.items() if k != "DEALBASE_DATABASE_URL"
        }
        report.phases.append(bench.baseline())
        report.phases.append(bench.live(stack))
    report.load_average["after"] = load_average()
    return report


def main() -> int:
    parser = arguments_parser(
        __doc__,
        "Settings: BENCH_LIVE_SUBSCRIBERS, BENCH_LIVE_RATE, BENCH_LIVE_DEFLATE,"
        " BENCH_SECONDS, BENCH_WORKERS, BENCH_POOL_SIZE (bench/README.md).",
    )
    commands = parser.add_subparsers(dest="command")
    subscriber = commands.add_parser("subscribe", help="(internal) the subscribers' process")
    subscriber.add_argument("--host", required=True)
    subscriber.add_argument("--port", type=int, required=True)
    subscriber.add_argument("--count", type=int, required=True)
    subscriber.add_argument("--department")
    subscriber.add_argument("--deflate", action="store_true")
    parser.add_argument("--profile", action="store_true", help="py-spy on the server, live phase")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args()
    if arguments.command == "subscribe":
        subscribe(arguments)
        return 0
    run = stamp()
    return run_alone(
        "live",
        lambda: measure(
            Options(
                BenchSettings.from_environment(), RESULTS / f"{run}-logs", run, arguments.profile
            )
        ),
        tables,
        arguments.json,
    )


if __name__ == "__main__":
    sys.exit(main())
