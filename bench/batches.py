"""What a batch saves each synced record, without HTTP: the CPU a record costs the server and
PostgreSQL in a batch of 1,000 upserts, against the same records upserted one PUT each, in the
same run (the baseline).

    .venv/bin/python bench/batches.py                     # customers, deals and activities
    .venv/bin/python bench/batches.py activities --rounds 5
    PYTHONPATH=/tmp/old/src .venv/bin/python bench/batches.py   # another commit's src

For each record and round, on a scratch database (the settings of bench/inprocess.py: JSON
access lines at info, metrics, Redis rate limits): a batch of BATCH upserts of new records
(every result `created`), then the same batch again with every tenth record changed
(`updated`, the rest `unchanged`); then SINGLE other records one PUT each, new and then again
with every tenth changed. Every answer is checked (status, outcome of each result). The figure
is the CPU a record of the process and of PostgreSQL's backends, and the ratio how many times
cheaper a record of a batch is than one of a PUT (higher is better). A record whose batches are
written in bulk (`record_writes.IN_BULK`) costs the same few statements for the whole batch; one
written one at a time (a deal: its own create, customers and first step) a few per record.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.asgi import request, serving_settings, sized
from harness.console import arguments_parser
from harness.cpu import CpuUse
from harness.stack import provision, scratch_database

API = "/api/v1/integration"
BATCH = 1_000
SINGLE = 200

# Each record's upsert body (``label`` its text that a changed record changes), given what the
# department already holds (``refs``: an activity names a customer).
BODIES: dict[str, Callable[[dict[str, str], str], dict[str, Any]]] = {
    "customers": lambda refs, label: {"last_name": label, "city": "London"},
    "deals": lambda refs, label: {"name": label, "volume": 1000},
    "activities": lambda refs, label: {
        "type": "call",
        "customer_id": refs["customer_id"],
        "subject": label,
    },
}


class Failed(Exception):
    pass


async def _send(app: Any, method: str, path: str, payload: Any, headers: Any) -> tuple[int, Any]:
    body = json.dumps(payload).encode()
    answer: list[bytes] = []
    status = await request(app, path, body, sized(headers, body), answer, method=method)
    return status, json.loads(b"".join(answer))


def _label(round_: int, n: int, again: bool) -> str:
    return f"R{round_}-{n}" + ("-changed" if again and n % 10 == 0 else "")


def _expected(n: int, again: bool) -> str:
    return ("updated" if n % 10 == 0 else "unchanged") if again else "created"


async def _round(
    app: Any, headers: Any, noun: str, refs: dict[str, str], round_: int, database: str
) -> dict[str, float]:
    """The CPU a record (µs, the process + PostgreSQL) of each mode in this round."""
    body = BODIES[noun]
    figures: dict[str, float] = {}
    for again in (False, True):
        operations = [
            {
                "op": "upsert",
                "external_id": f"b{round_}-{n}",
                "data": body(refs, _label(round_, n, again)),
            }
            for n in range(BATCH)
        ]
        started = time.process_time()
        with CpuUse(None, database) as used:
            status, answer = await _send(
                app, "POST", f"{API}/{noun}/batch", {"operations": operations}, headers
            )
        process = time.process_time() - started
        if status != 200:
            raise Failed(f"{noun} batch answered {status}: {str(answer)[:300]}")
        outcomes = [result["outcome"] for result in answer["results"]]
        if outcomes != [_expected(n, again) for n in range(BATCH)]:
            raise Failed(f"{noun} batch's outcomes: {sorted(set(outcomes))}")
        mode = "batch, again" if again else "batch, new"
        figures[mode] = (process * 1e6 + used.seconds["postgres"] * 1e6) / BATCH
    for again in (False, True):
        started = time.process_time()
        with CpuUse(None, database) as used:
            for n in range(SINGLE):
                path = f"{API}/{noun}/by-external-id/s{round_}-{n}"
                status, answer = await _send(
                    app, "PUT", path, body(refs, _label(round_, n, again)), headers
                )
                if status != (200 if again else 201):
                    raise Failed(f"{noun} PUT answered {status}: {str(answer)[:300]}")
        process = time.process_time() - started
        mode = "PUT, again" if again else "PUT, new"
        figures[mode] = (process * 1e6 + used.seconds["postgres"] * 1e6) / SINGLE
    return figures


async def _measure(
    app: Any, headers: Any, nouns: list[str], rounds: int, database: str
) -> dict[str, list[dict[str, float]]]:
    async with app.router.lifespan_context(app):
        status, customer = await _send(
            app, "POST", f"{API}/customers", {"last_name": "Ref"}, headers
        )
        if status != 201:
            raise Failed(f"a customer answered {status}")
        refs = {"customer_id": customer["id"]}
        for noun in nouns:  # warm: statements prepared, pools full, the key cached
            for n in range(50):
                path = f"{API}/{noun}/by-external-id/warm-{n}"
                await _send(app, "PUT", path, BODIES[noun](refs, "W"), headers)
            warm = [
                {"op": "upsert", "external_id": f"warm-batch-{n}", "data": BODIES[noun](refs, "W")}
                for n in range(50)
            ]
            await _send(app, "POST", f"{API}/{noun}/batch", {"operations": warm}, headers)
        return {
            noun: [await _round(app, headers, noun, refs, r, database) for r in range(rounds)]
            for noun in nouns
        }


def main() -> None:
    parser = arguments_parser(__doc__)
    parser.add_argument("records", nargs="*", help=f"of {', '.join(BODIES)} (all by default)")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    unknown = set(arguments.records) - set(BODIES)
    if unknown:
        parser.error(f"no such record: {', '.join(sorted(unknown))}")
    nouns = arguments.records or list(BODIES)
    server = os.environ.get(
        "DEALBASE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    with scratch_database(server) as database:
        tenant = provision(database)
        redis_url = os.environ.get("DEALBASE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
        os.environ.update(serving_settings(database, redis_url))
        log = open(os.devnull, "w")  # noqa: SIM115 (open for the whole run)
        streams = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            from dealbase.app import create_app

            app = create_app()
            headers = [
                (b"host", b"bench"),
                (b"content-type", b"application/json"),
                (b"content-length", b"0"),
                *(
                    (name.lower().encode(), value.encode())
                    for name, value in tenant.headers.items()
                ),
            ]
            measured = uvloop.run(_measure(app, headers, nouns, arguments.rounds, database))
        finally:
            sys.stdout, sys.stderr = streams
            log.close()
    print(
        f"µs of CPU a record (the process + PostgreSQL), medians of {arguments.rounds} rounds;"
        f" a batch of {BATCH:,} upserts against {SINGLE} PUTs, each new and then again (every tenth changed)"
    )
    print(
        f"{'record':<11} {'batch, new':>11} {'PUT, new':>9} {'ratio':>6}   {'batch, again':>12} {'PUT, again':>10} {'ratio':>6}"
    )
    for noun, rounds in measured.items():
        median = {mode: statistics.median(r[mode] for r in rounds) for mode in rounds[0]}
        print(
            f"{noun:<11} {median['batch, new']:>11,.0f} {median['PUT, new']:>9,.0f}"
            f" {median['PUT, new'] / median['batch, new']:>5.1f}x"
            f"   {median['batch, again']:>12,.0f} {median['PUT, again']:>10,.0f}"
            f" {median['PUT, again'] / median['batch, again']:>5.1f}x"
        )


if __name__ == "__main__":
    main()
