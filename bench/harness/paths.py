"""Where things are: the repository, this folder, the virtual environment's tools."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
TOOLS = BENCH / ".tools"
WRK_SCRIPTS = BENCH / "wrk"
QUERIES = BENCH / "queries"
POSTGRAPHILE = BENCH / "postgraphile"
BASELINES = BENCH / "baselines"
PGBENCH_SCRIPTS = BENCH / "pgbench"
# The interpreter running the harness is the project's virtual environment's.
VENV_BIN = Path(sys.executable).parent


def venv_tool(name: str) -> str:
    return str(VENV_BIN / name)
