"""The CPU one request costs the server, without HTTP, for A/B comparisons of the hot path.

`make bench` measures throughput beside a peer, and its ratios move between runs on a shared
machine by more than a small change of a request's CPU is worth. This calls the ASGI
app directly on its own event loop, with its lifespan (pools, Redis limiter, key cache), 8
requests at a time, and reports the CPU time per request for each round of the process, of
the PostgreSQL backends serving its scratch database and of Redis (`harness/cpu.py`): the same
routes and settings as `make bench` (JSON access lines at info, written to a file; metrics on;
Redis rate limits), with no client in the process.

    .venv/bin/python bench/inprocess.py dealbase --path /api/v1/integration/customers
    .venv/bin/python bench/inprocess.py baseline
    PYTHONPATH=/tmp/old/src .venv/bin/python bench/inprocess.py dealbase   # another commit's src
    .venv/bin/python bench/inprocess.py dealbase --calls   # calls a request makes, by package
    .venv/bin/python bench/inprocess.py dealbase --calls function   # by function
    .venv/bin/python bench/inprocess.py dealbase --graphql dashboard   # bench/queries/<name>
    .venv/bin/python bench/inprocess.py baseline --get "/api/v1/integration/customers?limit=50"
    .venv/bin/python bench/inprocess.py dealbase --get "/api/v1/integration/customers/{id}"
    .venv/bin/python bench/inprocess.py dealbase --without access-lines --without metrics
    .venv/bin/python bench/inprocess.py dealbase --instructions   # counted by callgrind
    .venv/bin/python bench/inprocess.py dealbase --custom-fields   # bench/custom_fields.py's 20

`--instructions` counts the instructions the process executes for a number of requests under
valgrind's callgrind instead of timing rounds: nearly the same count whatever else the machine
does (two counts run at once differ a little more than two run alone, as the admissions' refresh
follows the clock), so a change far smaller than the CPU rounds' spread shows. Valgrind slows a
request by about `--slowdown` times, so the clock of the local rate-limit admissions is slowed
as much: they ask Redis as often per request as at full speed. The count stands for the
server's CPU: counted this way through uvicorn, dealbase's and the baseline's instructions a
request stood in the ratio `make bench` read of their CPU (commit b841633). Compare counts of
the same `--requests` (what a run does once, a refresh of the rate limits, spreads over them).

Alternate two commits' rounds (a `git worktree` of the other and `PYTHONPATH`), several times:
one pair of rounds says little.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from custom_fields import define_fields_by_cli
from harness.asgi import request, serving_settings, sized
from harness.console import arguments_parser
from harness.cpu import CpuUse
from harness.paths import BASELINES, QUERIES
from harness.stack import provision, scratch_database

CUSTOMER = {
    "last_name": "Lovelace",
    "first_name": "Ada",
    "email": "ada@example.com",
    "company": "Analytical Engines Ltd",
    "city": "London",
}
DEAL = {"name": "Engine", "volume": 1000, "customers": [{"last_name": n} for n in "ABC"]}
CONCURRENCY = 8
REQUESTS = 800  # a round's
INSTRUMENTED_REQUESTS = 160  # under callgrind (--instructions)


def _without_access_lines() -> None:
    os.environ["DEALBASE_LOG_LEVEL"] = "warning"


def _without_redis() -> None:
    """The rate limits kept in the process instead (``InProcessLimiter``): Redis's share."""
    del os.environ["DEALBASE_REDIS_URL"]


def _without_metrics() -> None:
    from dealbase.ops.metrics import Metrics

    Metrics.request_answered = lambda *_: None  # type: ignore[method-assign]
    Metrics.unit_of_work_started = lambda *_: None  # type: ignore[method-assign]


# Parts of every request a run may leave out (``--without``), to measure each one's share.
WITHOUT = {
    "access-lines": _without_access_lines,
    "redis": _without_redis,
    "metrics": _without_metrics,
}


async def _calls(app: Any, path: str, body: bytes, headers: Any, n: int, by_function: bool) -> str:
    """Python and C calls a request makes (coroutine resumptions counted as calls), by
    package or by function: where the CPU goes without a sampler's noise."""
    calls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            where = frame.f_code.co_filename.split("site-packages/")[-1].split("/src/")[-1]
            # A path still absolute: the standard library's.
            if by_function:
                calls[f"python {where}:{frame.f_code.co_name}"] += 1
            else:
                calls["python " + (where.split("/")[0] or "standard library")] += 1
        elif event == "c_call":
            calls["C"] += 1

    sys.setprofile(count)
    try:
        for _ in range(n):
            await request(app, path, body, headers)
    finally:
        sys.setprofile(None)
    python = sum(value for key, value in calls.items() if key.startswith("python"))
    lines = [f"Python calls per request {python / n:,.0f}, C calls {calls['C'] / n:,.0f}"]
    lines += [
        f"  {value / n:7.1f}  {key}"
        for key, value in calls.most_common()
        if key.startswith("python") and value / n >= 1
    ]
    return "\n".join(lines)


async def _measure(
    app: Any,
    database: str,
    path: str,
    body: bytes,
    headers: Any,
    rounds: int,
    n: int,
    calls: str | None,
) -> list[tuple[float, float, float]] | str:
    """The calls of 100 requests (``calls``), or each round's CPU a request of this process,
    of PostgreSQL's backends serving ``database`` and of Redis."""
    async with app.router.lifespan_context(app):
        if path == "/graphql" or (not body and "/deals" in path):
            # something to read: 60 deals of 3 customers
            deal = json.dumps(DEAL).encode()
            for _ in range(60):
                assert (
                    await request(app, "/api/v1/integration/deals", deal, sized(headers, deal))
                    == 201
                )
        elif not body:  # 60 customers to read (the baseline has no deals)
            customer = json.dumps(CUSTOMER).encode()
            for _ in range(60):
                answer: list[bytes] = []
                created = await request(
                    app,
                    "/api/v1/integration/customers",
                    customer,
                    sized(headers, customer),
                    answer,
                )
                assert created == 201
            # ``{id}`` in the path: the last customer made.
            path = path.replace("{id}", json.loads(b"".join(answer))["id"])
        expected = 200 if path == "/graphql" or not body else 201
        for _ in range(50):  # warm: the key cached, statements prepared, pools full
            status = await request(app, path, body, headers)
            assert status == expected, f"{path} answered {status}"
        if calls:
            return await _calls(app, path, body, headers, 100, calls == "function")
        if os.environ.get(_UNDER_CALLGRIND):
            await _instrumented(app, path, body, headers, n)
            return []
        per_request = []
        for _ in range(rounds):
            started = time.process_time()

            async def client() -> None:
                for _ in range(n // CONCURRENCY):
                    await request(app, path, body, headers)

            with CpuUse(None, database) as used:
                await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
            parties = used.per_request(n)
            per_request.append(
                ((time.process_time() - started) / n * 1e6, parties["postgres"], parties["redis"])
            )
        return per_request


# Set in the process that callgrind runs (``--instructions``): its requests to count.
_UNDER_CALLGRIND = "INPROCESS_UNDER_CALLGRIND"
_COLLECTED = re.compile(r"Collected : (\d+)")


async def _instrumented(app: Any, path: str, body: bytes, headers: Any, n: int) -> None:
    """``n`` requests, ``CONCURRENCY`` at a time, with callgrind's instrumentation on."""

    async def client() -> None:
        for _ in range(n // CONCURRENCY):
            await request(app, path, body, headers)

    instrument = ["callgrind_control", "--instr=on", str(os.getpid())]
    subprocess.run(instrument, check=True, capture_output=True)
    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    instrument[1] = "--instr=off"
    subprocess.run(instrument, check=True, capture_output=True)


def _slowed_admissions(slowdown: float) -> None:
    """The local rate-limit admissions' clock slowed ``slowdown`` times, as valgrind slows the
    requests: they ask Redis as often per request as at full speed."""
    from dealbase.tenancy.rate_limits import local_admissions

    made = local_admissions.LocalAdmissions.__init__
    start = time.monotonic()

    def slowed() -> float:
        return start + (time.monotonic() - start) / slowdown

    def init(self: Any, shared: Any, *, clock: Any = None) -> None:
        made(self, shared, clock=slowed)

    local_admissions.LocalAdmissions.__init__ = init  # type: ignore[method-assign]


def _count_instructions(arguments: argparse.Namespace) -> None:
    """Runs this script under callgrind for ``--requests`` requests; prints the instructions a
    request."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    # The last --requests given is the one argparse keeps.
    argv = [arg for arg in sys.argv[1:] if arg != "--instructions"]
    argv += ["--requests", str(arguments.requests)]
    with tempfile.TemporaryDirectory() as kept:
        ran = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={kept}/callgrind.out",
                sys.executable,
                __file__,
                *argv,
            ],
            env={**os.environ, _UNDER_CALLGRIND: "1", "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=False,
        )
    collected = _COLLECTED.search(ran.stderr)
    if ran.returncode != 0 or collected is None:
        raise SystemExit(f"callgrind run failed ({ran.returncode}):\n{ran.stderr[-3000:]}")
    if arguments.graphql:
        route = f"POST /graphql ({arguments.graphql})"
    else:
        route = f"GET {arguments.get}" if arguments.get else f"POST {arguments.path}"
        if arguments.custom_fields:
            route += " (20 custom fields)"
    measured = " without ".join([arguments.server, *arguments.without])
    print(
        f"{measured} {route}: {int(collected.group(1)) / arguments.requests:,.0f}"
        f" instructions a request (callgrind, {arguments.requests} requests)"
    )


def main() -> None:
    parser = arguments_parser(__doc__)
    parser.add_argument("server", choices=("dealbase", "baseline"))
    parser.add_argument("--path", default="/api/v1/integration/customers")
    parser.add_argument("--get", metavar="PATH", help="GET PATH (with its query) instead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--requests",
        type=int,
        help=f"per round ({REQUESTS}), or counted with --instructions ({INSTRUMENTED_REQUESTS})",
    )
    parser.add_argument(
        "--calls",
        nargs="?",
        const="package",
        choices=("package", "function"),
        help="count the calls of 100 requests instead, by package (the default) or function",
    )
    parser.add_argument(
        "--custom-fields",
        action="store_true",
        help="POST /customers with a value for each of bench/custom_fields.py's 20 fields",
    )
    parser.add_argument(
        "--graphql", metavar="NAME", help="POST bench/queries/NAME.graphql ($first 50) instead"
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=sorted(WITHOUT),
        help="measure without this part of every request (again for several): its share",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count the instructions of --requests requests under callgrind instead (the"
        " module's docstring)",
    )
    parser.add_argument(
        "--slowdown",
        type=float,
        default=50.0,
        help="with --instructions: how much slower the rate limits' clock runs",
    )
    arguments = parser.parse_args()
    if arguments.requests is None:
        arguments.requests = INSTRUMENTED_REQUESTS if arguments.instructions else REQUESTS
    if arguments.instructions:
        _count_instructions(arguments)
        return
    server = os.environ.get(
        "DEALBASE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    redis_url = os.environ.get("DEALBASE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
    body = json.dumps(DEAL if arguments.path.endswith("/deals") else CUSTOMER).encode()
    if arguments.get:
        arguments.path, body = arguments.get, b""
    if arguments.graphql:
        arguments.path = "/graphql"
        query = (QUERIES / f"{arguments.graphql}.graphql").read_text()
        body = json.dumps({"query": query, "variables": {"first": 50}}).encode()
    with scratch_database(server) as database:
        tenant = provision(database)
        if arguments.custom_fields:
            customer = {**CUSTOMER, "custom_fields": define_fields_by_cli(database, tenant)}
            body = json.dumps(customer).encode()
        os.environ.update(serving_settings(database, redis_url))
        for part in arguments.without:
            WITHOUT[part]()
        if os.environ.get(_UNDER_CALLGRIND):
            _slowed_admissions(arguments.slowdown)
        # The access lines are written, as in `make bench`, but to nowhere; the figures to stdout.
        log = open(os.devnull, "w")  # noqa: SIM115 (open for the whole run)
        streams = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            if arguments.server == "baseline":
                sys.path.insert(0, str(BASELINES))
                from fastapi_psycopg import app  # type: ignore[import-not-found]
            else:
                from dealbase.app import create_app

                app = create_app()
            headers = [
                (b"host", b"bench"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(
                    (name.lower().encode(), value.encode())
                    for name, value in tenant.headers.items()
                ),
            ]
            rounds = uvloop.run(
                _measure(
                    app,
                    database,
                    arguments.path,
                    body,
                    headers,
                    arguments.rounds,
                    arguments.requests,
                    arguments.calls,
                )
            )
        finally:
            sys.stdout, sys.stderr = streams
            log.close()
    method = "POST" if body else "GET"
    measured = " without ".join([arguments.server, *arguments.without])
    if isinstance(rounds, str):
        print(f"{measured} {method} {arguments.path}: {rounds}")
        return
    figures = ", ".join(
        f"{server:,.0f} + {postgres:,.0f} + {redis:,.0f}" for server, postgres, redis in rounds
    )
    print(
        f"{measured} {method} {arguments.path}: µs of CPU per request (the process"
        f" + PostgreSQL + Redis), by round: {figures}"
    )


if __name__ == "__main__":
    main()
