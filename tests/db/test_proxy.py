"""A database reached through pgbouncer is told from one reached directly, and a server whose
settings do not say so warns at start-up (it would otherwise fail requests without a word)."""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient
from psycopg.conninfo import conninfo_to_dict
from structlog.testing import capture_logs

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import libpq_url
from dealbase.db.proxy import through_a_proxy
from tests.support import IN_CI, through_pgbouncer


@pytest.fixture
def bounced_url(database_url: str) -> str:
    if not os.environ.get("DEALBASE_TEST_PGBOUNCER_URL"):
        if IN_CI:
            raise RuntimeError("CI=true but DEALBASE_TEST_PGBOUNCER_URL is not set (.ci/run)")
        pytest.skip("no pgbouncer: .ci/start-pgbouncer starts one")
    return through_pgbouncer(database_url)


def test_a_direct_connection_is_not_through_a_proxy(database_url: str) -> None:
    over_tcp = not str(conninfo_to_dict(libpq_url(database_url)).get("host", "/")).startswith("/")
    # Over a Unix socket (the embedded PostgreSQL) there is no address to compare.
    assert through_a_proxy(database_url) is (False if over_tcp else None)


def test_a_connection_through_pgbouncer_is_through_a_proxy(bounced_url: str) -> None:
    assert through_a_proxy(bounced_url) is True


@pytest.mark.parametrize(("told", "warned"), [(False, True), (True, False)])
def test_a_server_behind_pgbouncer_warns_at_start_up_unless_told(
    settings: Settings, bounced_url: str, told: bool, warned: bool
) -> None:
    behind = settings.model_copy(update={"database_url": bounced_url, "db_pgbouncer": told})
    app = create_app(behind)  # before the capture: it configures the logging
    with capture_logs() as logs, TestClient(app):
        pass
    events = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert ("database_through_a_proxy" in events) is warned
