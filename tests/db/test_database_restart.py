"""A PostgreSQL restart under load, clean and by ``kill -9``: while it is down every request is
answered 503 with Retry-After in bounded time (never a 500, never a hang); within 5 s of it
being back every request is served again, without restarting dealbase; and every customer that
was answered 201 is in the database afterwards.

The server is the test's own (pgserver's binaries in a scratch directory), so stopping it
disturbs nothing else."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
import pytest
from fastapi.testclient import TestClient
from pgserver._commands import POSTGRES_BIN_PATH
from pgserver.postgres_server import get_server

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.migrations.runner import upgrade_control
from tests.support import TenantWorld, ThreadsUntilStopped, build_tenant

# Bounds on answer and recovery times, under a load the test makes itself: alone on the machine.
pytestmark = pytest.mark.serial

API = "/api/v1/integration"
CLIENTS = 4
# The longest a request may take while PostgreSQL is down: the acquire timeout, with room for a
# busy machine.
ANSWER_BOUND_S = 5.0
RECOVERY_BOUND_S = 5.0


class Cluster:
    """A PostgreSQL server that a test may stop, kill and start again."""

    def __init__(self, directory: Path) -> None:
        with warnings.catch_warnings():
            # pgserver asks platformdirs for a runtime dir, which warns where XDG_RUNTIME_DIR is
            # unset (containers, CI) and then falls back correctly.
            warnings.simplefilter("ignore")
            self.server = get_server(directory, cleanup_mode="delete")
        self.url = self.server.get_uri()

    def stop_cleanly(self) -> None:
        subprocess.run(
            [POSTGRES_BIN_PATH / "pg_ctl", "-D", self.server.pgdata, "-w", "-m", "fast", "stop"],
            user=self.server.system_user,  # pgserver's own user when the tests run as root
            check=True,
            capture_output=True,
            timeout=30,
        )

    def kill(self) -> None:
        """SIGKILL to the postmaster, as the OOM killer would; its backends notice and exit."""
        postmaster = psutil.Process(self.server.get_pid())
        children = postmaster.children()
        os.kill(postmaster.pid, signal.SIGKILL)
        _, alive = psutil.wait_procs([postmaster, *children], timeout=10)
        for straggler in alive:
            straggler.kill()

    def start(self) -> None:
        self.server.ensure_postgres_running()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # Not under pytest's temporary folder: pytest keeps its root private (0700), and as root the
    # server runs as pgserver's own user, which must reach the data folder.
    folder = Path(tempfile.mkdtemp(prefix="dealbase-restart-"))
    folder.chmod(0o755)
    cluster = Cluster(folder / "postgres")
    try:
        yield cluster
    finally:
        cluster.server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Answer:
    name: str
    started: float
    finished: float
    status: int
    retry_after: str | None
    content_type: str


class Load(ThreadsUntilStopped):
    """Clients creating customers one after another on keep-alive connections until stopped."""

    def __init__(self, client: TestClient, world: TenantWorld) -> None:
        super().__init__(CLIENTS, join_seconds=30)
        self._client, self._headers = client, world.key.headers
        self.answers: list[Answer] = []

    def loop(self, index: int) -> None:
        sent = 0
        while not self.stopping.is_set():
            name = f"client {index} request {sent}"
            sent += 1
            started = time.monotonic()
            response = self._client.post(
                f"{API}/customers", json={"last_name": name}, headers=self._headers
            )
            self.answers.append(
                Answer(
                    name,
                    started,
                    time.monotonic(),
                    response.status_code,
                    response.headers.get("retry-after"),
                    response.headers.get("content-type", ""),
                )
            )
            time.sleep(0.02)


def _served_after(answers: list[Answer], moment: float) -> Callable[[], bool]:
    def served() -> bool:
        return any(a.status == 201 and a.started >= moment for a in answers)

    return served


def _fully_served(answers: list[Answer], moment: float, in_a_row: int = 5) -> Callable[[], bool]:
    """Whether each client's last ``in_a_row`` answers, all begun after ``moment``, are 201."""

    def served() -> bool:
        latest: dict[str, list[Answer]] = {}
        for answer in answers:
            if answer.started >= moment:
                latest.setdefault(answer.name.rsplit(" request ", 1)[0], []).append(answer)
        return len(latest) == CLIENTS and all(
            len(mine) >= in_a_row and all(a.status == 201 for a in mine[-in_a_row:])
            for mine in latest.values()
        )

    return served


def _wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("outage", ["clean stop", "kill -9"])
def test_a_postgresql_restart_under_load_answers_503_then_recovers_and_loses_no_201(
    cluster: Cluster, tmp_path: Path, outage: str
) -> None:
    database = Database(cluster.url, pool_size=1)
    with database.control() as connection:
        upgrade_control(connection)
    world = build_tenant(database)
    database.dispose()
    settings = Settings(
        database_url=cluster.url,
        data_dir=tmp_path / "data",
        log_level="error",
        rate_limit_key="100000/s",
        rate_limit_key_burst=1_000_000,
        rate_limit_tenant="100000/s",
        rate_limit_tenant_burst=1_000_000,
        db_acquire_timeout_ms=1000,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        with Load(client, world) as load:
            assert _wait_for(lambda: sum(a.status == 201 for a in load.answers) >= 20, 30)
            down_at = time.monotonic()
            cluster.kill() if outage == "kill -9" else cluster.stop_cleanly()
            # Down long enough for each client to be refused a few times.
            assert _wait_for(
                lambda: (
                    sum(a.status == 503 and a.started > down_at for a in load.answers)
                    >= 2 * CLIENTS
                ),
                30,
            ), "no request was refused while PostgreSQL was down"
            cluster.start()
            back_at = time.monotonic()
            assert _wait_for(_served_after(load.answers, back_at), RECOVERY_BOUND_S + 5)
            # Then full service: every client's latest answers all 201.
            assert _wait_for(_fully_served(load.answers, back_at), RECOVERY_BOUND_S + 10)
        answers = list(load.answers)

    assert {a.status for a in answers} <= {201, 503}, sorted({a.status for a in answers})
    refused = [a for a in answers if a.status == 503]
    assert refused
    assert all(a.retry_after and a.content_type == "application/problem+json" for a in refused)
    slowest = max(a.finished - a.started for a in answers)
    assert slowest < ANSWER_BOUND_S, f"a request took {slowest:.1f} s"
    late = [a for a in refused if a.started > back_at + RECOVERY_BOUND_S]
    assert not late, f"{len(late)} requests refused more than 5 s after PostgreSQL was back"
    created = {a.name for a in answers if a.status == 201}
    with psycopg.connect(cluster.url) as connection:
        stored = {
            row[0]
            for row in connection.execute(
                f'SELECT last_name FROM "{world.tenant.schema}".customers'
            )
        }
    assert created <= stored, f"{len(created - stored)} customers answered 201 are missing"
