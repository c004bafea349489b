"""On a terminal, `dealbase migrate` shows its progress over the tenant schemas."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from dealbase.db.database import Database
from dealbase.tenancy.registry.tenants import create_tenant

DEALBASE = Path(sys.executable).parent / "dealbase"


def run_on_a_terminal(arguments: list[str], env: dict[str, str]) -> tuple[int, str]:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [str(DEALBASE), *arguments], stdin=terminal, stdout=terminal, stderr=terminal, env=env
    )
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closes when the process exits
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    return process.wait(timeout=60), output.decode(errors="replace")


def test_migrate_on_a_terminal_shows_a_progress_bar_over_the_tenants(
    migrated_database: Database, empty_database_url: str
) -> None:
    for name in ("one", "two", "three"):
        create_tenant(migrated_database, f"progress-{name}")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEALBASE_")},
        "DEALBASE_DATABASE_URL": empty_database_url,
        "DEALBASE_LOG_LEVEL": "warning",
        "TERM": "xterm",
    }

    on_terminal = run_on_a_terminal(["migrate", "--all", "--concurrency", "2"], env)
    as_json = subprocess.run(
        [str(DEALBASE), "migrate", "--json"], env=env, capture_output=True, text=True, check=True
    )

    status, output = on_terminal
    assert status == 0, output
    # rich's bar: the task's name, a bar and the percentage done (the summary line has neither).
    assert "tenant schemas" in output and "━" in output and "100%" in output
    assert "━" not in as_json.stdout + as_json.stderr
