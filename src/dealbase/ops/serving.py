"""How ``dealbase serve`` runs uvicorn, through its public ``Config`` and ``Server``, in this
process or in worker processes (``Workers``), so that stopping it drops no request.

On SIGTERM (or a first Ctrl-C) each worker drains for ``DRAIN_SECONDS`` before uvicorn's own
graceful shutdown begins:

- The listening socket is shut down, which stops it listening in every worker at once: the
  kernel refuses new connections instead of completing some no process will accept (and resetting
  them as the processes exit), which it did while any one worker, or the supervisor, still held it.
- Every answer closes its connection (``edge.draining``), and the live streams end. uvicorn alone
  closes each idle kept-alive connection at once, and a client that sent its next request on one
  a moment earlier has it reset; draining, that request is answered, with ``Connection: close``.

Then uvicorn stops as it does: it closes the connections still idle, lets the requests in
progress finish (within ``DEALBASE_SHUTDOWN_TIMEOUT_SECONDS``), closes each WebSocket with 1012
and ends the app's lifespan.

A request's head is not bounded here: uvicorn has no public bound on the time it takes, and the
proxy deploy/ runs in front answers that (docs/operations.md, "The proxy"). ``dealbase serve``
alone (``make run``) is a development server.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import socket
import threading
from multiprocessing.process import BaseProcess
from types import FrameType

import structlog
from uvicorn import Config, Server
from uvicorn.config import STARTUP_FAILURE

from dealbase.edge.draining import PROCESS_DRAINING

log = structlog.get_logger(__name__)

# Longer than a client takes between a response and its next request on the same connection.
DRAIN_SECONDS = 1.0
# How often the supervisor looks whether a worker has stopped, between signals.
WORKERS_WATCH_SECONDS = 0.5


class DrainingServer(Server):
    """uvicorn's server, draining for ``DRAIN_SECONDS`` at the first signal to stop."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.listening: list[socket.socket] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.signalled = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.listening = list(sockets or ())
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        loop = self.loop
        if loop is None or self.signalled or self.should_exit:
            # Not serving yet, or a second signal: stopping goes on as uvicorn's own.
            super().handle_exit(sig, frame)
            return
        self.signalled = True
        # In the loop's own turn: this runs in a signal handler, between any two of its steps.
        loop.call_soon_threadsafe(self.drain, loop, sig, frame)

    def drain(self, loop: asyncio.AbstractEventLoop, sig: int, frame: FrameType | None) -> None:
        for listening in self.listening:
            with contextlib.suppress(OSError):  # another worker shut the shared socket first
                listening.shutdown(socket.SHUT_RD)
        # In the same turn as the shutdown, so that no accept runs on the shut socket.
        for server in self.servers:
            server.close()
        PROCESS_DRAINING.begin()
        loop.call_later(DRAIN_SECONDS, super().handle_exit, sig, frame)


def bound_unacknowledged_writes(listening: socket.socket, write_timeout_seconds: float) -> None:
    """Gives each connection ``listening`` accepts TCP_USER_TIMEOUT of ``write_timeout_seconds``
    (a TCP socket, where the system has it; a Unix socket is left as it is)."""
    if hasattr(socket, "TCP_USER_TIMEOUT") and listening.family != socket.AF_UNIX:
        # The kernel gives up a connection whose data waits unacknowledged this long, a
        # full receive window included, and every connection accepted inherits it: a client
        # that never reads cannot hold a socket and its buffers. Closing a connection is not
        # enough, its buffered data would wait for the client for ever.
        timeout_ms = int(write_timeout_seconds * 1000)
        listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout_ms)


def serve_in_worker(config: Config, sockets: list[socket.socket]) -> None:
    """A worker process's life (``Workers``)."""
    config.configure_logging()
    DrainingServer(config).run(sockets)


class Workers:
    """``config.workers`` processes serving ``sockets``, each its own ``DrainingServer``, started
    afresh (spawned) as uvicorn starts its own. A worker that stops on its own is replaced,
    unless it failed to start (then every worker stops: the next would fail the same way). On
    SIGTERM or SIGINT each worker is sent SIGTERM, and drains; the first to drain shuts the
    shared listening socket down for all."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        self.config = config
        self.sockets = sockets
        self.stop = threading.Event()
        self.signals: list[int] = []
        self.processes: list[BaseProcess] = []

    def run(self) -> int:
        """Serves until a signal, or a worker's failed start; the exit status to end with."""
        handled = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self.signalled) for sig in handled}
        status = 0
        try:
            self.processes = [self.started() for _ in range(self.config.workers)]
            while not self.stop.wait(WORKERS_WATCH_SECONDS):
                status = self.replace_stopped()
        finally:
            for process in self.processes:
                process.terminate()
            for process in self.processes:
                process.join()
            for handled_signal, handler in previous.items():
                signal.signal(handled_signal, handler)
        for received in self.signals[:1]:
            # To the handler the caller had, as uvicorn's own server does.
            signal.raise_signal(received)
        return status

    def signalled(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        self.stop.set()

    def started(self) -> BaseProcess:
        process = multiprocessing.get_context("spawn").Process(
            target=serve_in_worker, args=(self.config, self.sockets)
        )
        process.start()
        return process

    def replace_stopped(self) -> int:
        for index, process in enumerate(self.processes):
            if process.is_alive():
                continue
            if process.exitcode == STARTUP_FAILURE:
                log.error("worker_failed_to_start", pid=process.pid)
                self.stop.set()
                return STARTUP_FAILURE
            log.warning("worker_stopped", pid=process.pid, exit_code=process.exitcode)
            self.processes[index] = self.started()
        return 0


def run(config: Config, write_timeout_seconds: float) -> None:
    """Serves ``config`` as ``uvicorn.run`` does, with ``DrainingServer``: in this process, or in
    ``config.workers`` worker processes (``Workers``); a connection whose client has not read
    (or acknowledged) what was written to it for ``write_timeout_seconds`` is dropped."""
    listening = config.bind_socket()
    bound_unacknowledged_writes(listening, write_timeout_seconds)
    if config.workers > 1:
        status = Workers(config, [listening]).run()
        if status:
            raise SystemExit(status)
    else:
        DrainingServer(config).run(sockets=[listening])
