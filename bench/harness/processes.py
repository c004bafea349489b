"""Servers the harness starts and stops: each in a process group of its own, so stopping one
ends its workers too and nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO

import httpx


class ServiceFailed(Exception):
    pass


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so servers stop and scratch databases are dropped."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Service:
    """One server on 127.0.0.1:port, its output in a log file."""

    def __init__(
        self,
        name: str,
        command: list[str],
        *,
        environment: dict[str, str],
        log_path: Path,
        port: int,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            env=environment,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, probe: Callable[[httpx.Client], bool], timeout: float = 90.0) -> None:
        """Until `probe` says yes; a server that exits or stays silent fails with its log."""
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base_url, timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise ServiceFailed(
                        f"{self.name} exited with {self.process.returncode}; the end of "
                        f"{self.log_path}:\n{log_tail(self.log_path)}"
                    )
                if self._failed_starting():
                    raise ServiceFailed(
                        f"{self.name} failed while starting; the end of "
                        f"{self.log_path}:\n{log_tail(self.log_path)}"
                    )
                try:
                    if probe(client):
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise ServiceFailed(
            f"{self.name} did not answer within {timeout:.0f} s; the end of {self.log_path}:\n"
            f"{log_tail(self.log_path)}"
        )

    def _failed_starting(self) -> bool:
        """A traceback before the first answer: uvicorn's supervisor would only start the failing
        worker again (and again)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        return "Traceback (most recent call last)" in text

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the server's process group (its workers), then SIGKILL if it lingers."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        # Workers may outlive a master that exited on its own: end what is left of the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()
