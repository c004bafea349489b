"""The contract as a user re-runs it (docs/api.md): a plain ``schemathesis run`` from the
repository's root, which picks up ``schemathesis.toml`` and its hooks, against a live ``dealbase
serve`` with a department's key, finds nothing. Every phase runs, with few examples."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.support import (
    SERVER_START_TIMEOUT_S,
    Credentials,
    ServeProcess,
    build_tenant,
    dealbase_serve,
    wait_until_served,
)

REPOSITORY = Path(__file__).parents[1]
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# A hang guard, not a bound on the run's speed: its few thousand requests took 4 minutes in a
# CI run on a busy machine, and past 5 with a second suite beside it.
RUN_TIMEOUT_S = 1200
EXAMPLES_PER_OPERATION = "2"

# Far above what the run sends: the rate limits have tests of their own, and a run waits out a
# 429 (schemathesis.toml), which would only make this one slower.
UNLIMITED = {
    "DEALBASE_RATE_LIMIT_KEY": "100000/s",
    "DEALBASE_RATE_LIMIT_KEY_BURST": "1000000",
    "DEALBASE_RATE_LIMIT_TENANT": "100000/s",
    "DEALBASE_RATE_LIMIT_TENANT_BURST": "1000000",
    "DEALBASE_RATE_LIMIT_AUTH_FAILURES": "100000/s",
    "DEALBASE_RATE_LIMIT_AUTH_FAILURES_BURST": "1000000",
}


@dataclass(frozen=True)
class Served:
    server: ServeProcess
    key: Credentials


@pytest.fixture(scope="module")
def served(
    database_url: str, database: Database, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A server on the test database, and a department of its own made as an operator makes
    one, with the employee the run's bodies assign deals to."""
    world = build_tenant(database)
    admin.create_employee(database, world.tenant.id, world.key.department_id, "Eve", None)
    settings = {"DEALBASE_DATABASE_URL": database_url, "DEALBASE_LOG_LEVEL": "warning", **UNLIMITED}
    with dealbase_serve(tmp_path_factory.mktemp("schemathesis-cli"), settings) as server:
        wait_until_served(
            server.process, f"{server.base_url}/healthz", server.output, SERVER_START_TIMEOUT_S
        )
        yield Served(server, world.key)


def test_a_plain_schemathesis_run_from_the_repository_root_finds_nothing(served: Served) -> None:
    key = served.key
    # The hooks come from schemathesis.toml, as in a user's shell without SCHEMATHESIS_HOOKS.
    environment = {
        name: value for name, value in os.environ.items() if name != "SCHEMATHESIS_HOOKS"
    }

    run = subprocess.run(  # noqa: S603 - the venv's own schemathesis
        [
            str(SCHEMATHESIS),
            "run",
            f"{served.server.base_url}/openapi.json",
            "-H",
            f"X-Api-Key: {key.api_key}",
            "-H",
            f"X-Department-Id: {key.department_id}",
            "--max-examples",
            EXAMPLES_PER_OPERATION,
        ],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )

    assert f"Configuration:    {REPOSITORY / 'schemathesis.toml'}" in run.stdout, run.stdout
    assert run.returncode == 0, f"schemathesis found something:\n{run.stdout}\n{run.stderr}"
