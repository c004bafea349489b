"""Where the workers of ``dealbase serve`` keep their metrics: a folder named by
PROMETHEUS_MULTIPROC_DIR, prepared before prometheus_client is first imported (it picks its kind
of values then), so this module does not import it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def prepare_metrics_dir() -> Path | None:
    """Points PROMETHEUS_MULTIPROC_DIR, which the workers inherit, at an empty folder: the one
    it names (emptied of a previous run's files, which would add their counts), else a new
    temporary one, returned to be removed when serving ends."""
    named = os.environ.get(MULTIPROCESS_DIR)
    if named:
        folder = Path(named)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):
            stale.unlink()
        return None
    os.environ[MULTIPROCESS_DIR] = tempfile.mkdtemp(prefix="dealbase-metrics-")
    return Path(os.environ[MULTIPROCESS_DIR])
