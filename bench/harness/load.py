"""The load generators: wrk with the Lua scripts of bench/wrk, and pgbench."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.figures import percentile
from harness.paths import PGBENCH_SCRIPTS, WRK_SCRIPTS
from harness.settings import BenchSettings


@dataclass
class Measurement:
    """What one load run measured; latencies in milliseconds."""

    requests: int
    seconds: float
    requests_per_second: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    errors: int
    error_detail: dict[str, int] = field(default_factory=dict)
    first_error: str = ""
    output: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class LoadFailed(Exception):
    pass


@dataclass(frozen=True)
class WrkLoad:
    """One wrk run: a script of bench/wrk against a base URL, with its environment."""

    script: str
    base_url: str
    environment: dict[str, str]


def run_wrk(wrk: str, load: WrkLoad, settings: BenchSettings, seconds: int) -> Measurement:
    command = [
        wrk,
        f"-t{settings.threads}",
        f"-c{settings.connections}",
        f"-d{seconds}s",
        f"--timeout={settings.timeout_seconds}s",
        "--latency",
        "-s",
        load.script,
        load.base_url,
    ]
    result = subprocess.run(
        command,
        cwd=WRK_SCRIPTS,
        env={**os.environ, **load.environment},
        capture_output=True,
        text=True,
        check=False,
        timeout=seconds + settings.timeout_seconds + 60,
    )
    output = result.stdout + result.stderr
    line = next(
        (row for row in result.stdout.splitlines() if row.startswith("BENCH_RESULT ")), None
    )
    if result.returncode != 0 or line is None:
        raise LoadFailed(f"wrk {load.script} failed ({result.returncode}):\n{output.strip()}")
    figures = json.loads(line.removeprefix("BENCH_RESULT "))
    latency = figures["latency_us"]
    detail = {
        "bad_responses": figures["bad_responses"],
        "connect": figures["connect_errors"],
        "read": figures["read_errors"],
        "write": figures["write_errors"],
        "timeout": figures["timeouts"],
    }
    duration = figures["duration_us"] / 1e6
    return Measurement(
        requests=figures["requests"],
        seconds=round(duration, 3),
        requests_per_second=figures["requests"] / duration if duration else 0.0,
        p50_ms=latency["p50"] / 1000,
        p90_ms=latency["p90"] / 1000,
        p99_ms=latency["p99"] / 1000,
        mean_ms=latency["mean"] / 1000,
        max_ms=latency["max"] / 1000,
        errors=sum(detail.values()),
        error_detail=detail,
        first_error=figures["first_bad"],
        output="\n".join(row for row in output.splitlines() if not row.startswith("BENCH_RESULT")),
    )


@dataclass(frozen=True)
class PgbenchLoad:
    database: str
    schema: str
    key_id: str
    department_id: str
    clients: int
    script: str  # bench/pgbench/<script>
    # "prepared" as dealbase and the baseline run their statements; "simple" where a script
    # sends two statements in one round trip (``\;``), which only the simple protocol carries.
    protocol: str = "prepared"


def run_pgbench(
    pgbench: str, load: PgbenchLoad, settings: BenchSettings, seconds: int
) -> Measurement:
    """A script's SQL from `clients` connections, the tenant's schema as search_path and its
    role as :role; latencies from pgbench's per-transaction log (-l)."""
    with tempfile.TemporaryDirectory(prefix="dealbase-pgbench-") as scratch:
        prefix = Path(scratch) / "log"
        command = [
            pgbench,
            "-n",
            "-M",
            load.protocol,
            "-c",
            str(load.clients),
            "-j",
            str(min(settings.threads, load.clients)),
            "-T",
            str(seconds),
            "-f",
            str(PGBENCH_SCRIPTS / load.script),
            "-D",
            f"role={load.schema}",
            "-D",
            f"key_id={load.key_id}",
            "-D",
            f"department_id={load.department_id}",
            "-l",
            f"--log-prefix={prefix}",
            load.database,
        ]
        result = subprocess.run(
            command,
            env={**os.environ, "PGOPTIONS": f"-c search_path={load.schema}"},
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 120,
        )
        output = (result.stdout + result.stderr).strip()
        latencies: list[float] = []
        for log in Path(scratch).glob("log.*"):
            for row in log.read_text().splitlines():
                parts = row.split()
                if len(parts) >= 3:
                    latencies.append(int(parts[2]) / 1000)
    if result.returncode != 0:
        raise LoadFailed(f"pgbench failed ({result.returncode}):\n{output}")
    processed = re.search(r"number of transactions actually processed: (\d+)", output)
    failed = re.search(r"number of failed transactions: (\d+)", output)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", output)
    if processed is None or tps is None or not latencies:
        raise LoadFailed(f"pgbench's output was not understood:\n{output}")
    ordered = sorted(latencies)
    failures = int(failed.group(1)) if failed else 0
    transactions = int(processed.group(1))
    return Measurement(
        requests=transactions,
        seconds=float(seconds),
        requests_per_second=float(tps.group(1)),
        p50_ms=percentile(ordered, 0.50),
        p90_ms=percentile(ordered, 0.90),
        p99_ms=percentile(ordered, 0.99),
        mean_ms=statistics.fmean(ordered),
        max_ms=ordered[-1],
        errors=failures,
        error_detail={"failed_transactions": failures},
        output=output,
    )
