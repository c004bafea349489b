"""The Citus tier: tests run against a real Citus cluster (a coordinator and two workers) at
DEALBASE_TEST_CITUS_URL, every tenant a distributed schema (DEALBASE_CITUS_SCHEMA_SHARDING).

.ci/run builds Citus and starts the cluster (../shared/citus/); under CI=true a missing cluster
fails these tests, elsewhere they are skipped with the two commands that make one."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tests.ops.conftest import CliRun, RunCli, invoke_cli
from tests.support import IN_CI

CITUS_SCRIPTS = Path(__file__).resolve().parents[3] / "shared" / "citus"
_MAKE_ONE = (
    f"build and start one with {CITUS_SCRIPTS}/build.sh and {CITUS_SCRIPTS}/cluster.sh start,"
    " then set DEALBASE_TEST_CITUS_URL to the URL the second prints"
)


@pytest.fixture(scope="session")
def citus_url() -> str:
    """The coordinator's URL; its database has the citus extension and two workers."""
    url = os.environ.get("DEALBASE_TEST_CITUS_URL")
    if not url:
        if IN_CI:
            raise RuntimeError(f"CI=true but DEALBASE_TEST_CITUS_URL is not set: {_MAKE_ONE}")
        pytest.skip(f"no Citus cluster: {_MAKE_ONE}")
    with psycopg.connect(url, connect_timeout=5) as connection:
        workers = connection.execute(
            "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0"
        ).fetchone()
    assert workers is not None and workers[0] >= 1, f"{url}: a Citus coordinator with no worker"
    return url


@pytest.fixture
def run_on_cluster(citus_url: str, tmp_path: Path) -> RunCli:
    """``dealbase`` on the cluster, tenants as distributed schemas."""

    def run(*args: str) -> CliRun:
        return invoke_cli(
            args,
            {
                "DEALBASE_DATABASE_URL": citus_url,
                "DEALBASE_CITUS_SCHEMA_SHARDING": "true",
                "DEALBASE_DATA_DIR": str(tmp_path / "cli-data"),
                "DEALBASE_LOG_LEVEL": "warning",
                "DEALBASE_REDIS_URL": None,
            },
        )

    return run
