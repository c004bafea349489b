"""For tests that take nodes of a Citus cluster down: a cluster of the test's own (the shared
one serves the other tests meanwhile), its nodes stopped and started with pg_ctl, and writers
that keep every answer with the moment it came, so that a test can tell what clients saw
before, during and after an outage."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from dealbase.tenancy.registry.placement import Node
from tests.citus.conftest import CITUS_SCRIPTS
from tests.support import ThreadsUntilStopped

ShutdownMode = Literal["fast", "immediate"]

# The ports scanned for three free ones in a row; the shared cluster's are 9700 to 9702.
_PORTS = range(9730, 9800, 3)
# Failure bounds only: a node of the test's cluster starts in a few seconds, initdb included.
_CLUSTER_START_S = 300.0
_NODE_START_S = 120


def _free(port: int) -> bool:
    with socket.socket() as probe:
        # As PostgreSQL binds: a port left in TIME_WAIT by a cluster of a previous run is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL's programs refuse to run as root: as cluster.sh does (``as_pg``)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass(frozen=True)
class OwnCluster:
    """A coordinator and two workers made by cluster.sh for one test module."""

    url: str
    base: Path
    coordinator: Node
    workers: tuple[Node, Node]

    def _pg_ctl(self, node: Node, *args: str) -> None:
        data = self.base / f"n{node.port}"
        pg_ctl = Path(_bindir()) / "pg_ctl"
        subprocess.run(
            _as_postgres([str(pg_ctl), "-D", str(data), *args]),
            check=True,
            capture_output=True,
            timeout=_NODE_START_S,
        )

    def stop(self, node: Node, mode: ShutdownMode) -> None:
        """Returns once the node has stopped: ``fast`` ends its sessions and checkpoints,
        ``immediate`` kills its processes as a crash would (recovery from the WAL at start)."""
        self._pg_ctl(node, "-m", mode, "-w", "stop")

    def start(self, node: Node) -> None:
        """Returns once the node accepts connections."""
        log = self.base / f"n{node.port}" / "log"
        self._pg_ctl(node, "-l", str(log), "-w", "-t", str(_NODE_START_S), "start")


def _bindir() -> str:
    return subprocess.run(
        ["pg_config", "--bindir"], check=True, capture_output=True, text=True
    ).stdout.strip()


def _cluster_sh(action: str, port: int, base: Path) -> str:
    env = {**os.environ, "CITUS_PORT": str(port), "CITUS_BASE": str(base)}
    done = subprocess.run(
        [str(CITUS_SCRIPTS / "cluster.sh"), action],
        env=env,
        capture_output=True,
        text=True,
        timeout=_CLUSTER_START_S,
    )
    assert done.returncode == 0, f"cluster.sh {action}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


@contextmanager
def own_cluster() -> Iterator[OwnCluster]:
    """A new cluster on three free ports from 9730 on, its data in a new folder under the
    system's temporary one (the postgres user must reach it, which pytest's 0700 folders
    forbid); destroyed afterwards."""
    port = next((p for p in _PORTS if all(_free(p + n) for n in range(3))), None)
    assert port is not None, f"no three free ports in a row in {_PORTS}"
    folder = Path(tempfile.mkdtemp(prefix="dealbase-citus-"))
    folder.chmod(0o755)
    base = folder / "cluster"
    try:
        url = _cluster_sh("start", port, base).splitlines()[-1]
        yield OwnCluster(
            url,
            base,
            Node("127.0.0.1", port),
            (Node("127.0.0.1", port + 1), Node("127.0.0.1", port + 2)),
        )
    finally:
        _cluster_sh("destroy", port, base)
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Answer:
    """One request's answer (status 0: no answer at all), on ``time.monotonic``."""

    writer: int
    sent_at: float
    answered_at: float
    status: int
    last_name: str
    customer_id: str | None
    retry_after: str | None
    body: str


# After an answer other than 201, a writer pauses this long before its next request: a client
# retrying at once would only add load, and Retry-After's seconds would blur how soon writes
# succeed again once the node is back. Pacing only; no test waits on it.
RETRY_PAUSE_S = 0.05


@dataclass
class TenantWriters(ThreadsUntilStopped):
    """One client for each of ``headers`` (a tenant's key each), creating customers one after
    another until stopped; every answer kept."""

    base_url: str
    headers: list[dict[str, str]]
    answers: list[Answer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        super().__init__(len(self.headers), join_seconds=120)

    def loop(self, writer: int) -> None:
        with httpx.Client(
            base_url=self.base_url, headers=self.headers[writer], timeout=60
        ) as client:
            count = 0
            while not self.stopping.is_set():
                count += 1
                last_name = f"w{writer}-{count}"
                sent_at = time.monotonic()
                try:
                    response = client.post(
                        "/api/v1/integration/customers", json={"last_name": last_name}
                    )
                except httpx.HTTPError as error:
                    answer = Answer(
                        writer, sent_at, time.monotonic(), 0, last_name, None, None, repr(error)
                    )
                else:
                    created = response.status_code == 201
                    answer = Answer(
                        writer,
                        sent_at,
                        time.monotonic(),
                        response.status_code,
                        last_name,
                        response.json()["id"] if created else None,
                        response.headers.get("retry-after"),
                        "" if created else response.text,
                    )
                with self.lock:
                    self.answers.append(answer)
                if answer.status != 201:
                    self.stopping.wait(RETRY_PAUSE_S)

    def kept(self) -> list[Answer]:
        with self.lock:
            return list(self.answers)

    def created_by(self, writer: int) -> list[str]:
        """The ids of the customers ``writer`` was answered 201 for."""
        return [a.customer_id for a in self.kept() if a.writer == writer and a.customer_id]

    def wait_until(self, holds: Callable[[list[Answer]], bool], what: str, within: float) -> None:
        """Returns once ``holds`` holds of the answers so far; fails after ``within`` seconds,
        or at once should any writer be answered other than 201 or a 503 with Retry-After
        (the failure message lists them)."""
        deadline = time.monotonic() + within
        while not holds(answers := self.kept()):
            assert not unexpected(answers), unexpected(answers)
            assert time.monotonic() < deadline, f"not within {within} s: {what}; {tally(answers)}"
            time.sleep(0.02)


def unexpected(answers: list[Answer]) -> list[str]:
    """Answers neither 201 nor a 503 with Retry-After, as ``status body``."""
    return [
        f"{a.status} {a.body}"
        for a in answers
        if a.status != 201 and not (a.status == 503 and a.retry_after)
    ]


def tally(answers: list[Answer]) -> dict[int, Counter[int]]:
    """How many answers of each status each writer had."""
    counts: dict[int, Counter[int]] = {}
    for answer in answers:
        counts.setdefault(answer.writer, Counter())[answer.status] += 1
    return counts
