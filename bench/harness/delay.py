"""A network delay in user space: TCP proxies that forward each direction's bytes a fixed time
after they were read, in order (this machine's kernel has no netem qdisc).

    with DelayProxies([("127.0.0.1", 9701), ("127.0.0.1", 9702)], delay=0.0005) as proxies:
        proxies.ports                 # where each target is reached through its proxy
        proxies.set_delay(0.0)        # for the connections open and those to come
        proxies.figures()             # what they did since the last call (then forgotten)

Each proxy listens on an ephemeral port of 127.0.0.1. Each connection it accepts has two
directions, each a reader thread and a sender thread: the reader stamps each chunk it reads with
`time.perf_counter()` and queues it; the sender sleeps (`time.sleep`: a timer of microseconds,
not asyncio's millisecond epoll timeouts) until the chunk is due, the stamp plus the delay, and
sends it. A delay of 0 keeps the same path, so the proxy's own cost is in both figures.

The proxies run in a process of their own (`python -m harness.delay SECONDS HOST:PORT...` in
bench/), so that the caller's Python never holds their GIL; it takes `delay SECONDS`, `figures`
and `stop`, one a line on its stdin, and answers one JSON line each, the first being the ports.
Its threads' timer slack is 1 us (prctl) rather than 50 us.

figures(): the delay set, the chunks sent, each one's lateness (sent minus due: what the
timer and the scheduler added to the delay) and its achieved delay (sent minus read), p50, p99
and max in milliseconds; bytes, connections accepted, and round trips: chunks read from the
client after the last one read came from the server (a client waiting for an answer before it
sends again, as the Citus coordinator does, crosses the delay twice for each).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import socket
import subprocess
import sys
import threading
import time
from queue import SimpleQueue
from types import TracebackType
from typing import Any

from harness.figures import percentiles
from harness.paths import BENCH

CHUNK = 65536
PR_SET_TIMERSLACK = 29


class Recorder:
    """The delay all proxies apply, and what they did; appends are atomic under the GIL."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.lateness: list[float] = []
        self.achieved: list[float] = []
        self.bytes = 0
        self.connections = 0
        self.round_trips = 0

    def figures(self) -> dict[str, Any]:
        with self.lock:
            figures = {
                "delay_ms": self.delay * 1000,
                "chunks": len(self.lateness),
                "bytes": self.bytes,
                "connections": self.connections,
                "round_trips": self.round_trips,
                "lateness_ms": percentiles(ms_of(self.lateness), (0.5, 0.99), digits=3),
                "achieved_ms": percentiles(ms_of(self.achieved), (0.5, 0.99), digits=3),
            }
            self._reset()
        return figures


def ms_of(seconds: list[float]) -> list[float]:
    return [value * 1000 for value in seconds]


class Connection:
    """A client's connection and the proxy's own to the target: a direction each way."""

    def __init__(self, client: socket.socket, server: socket.socket, recorder: Recorder) -> None:
        self.sockets = (client, server)
        self.recorder = recorder
        self.last_read_from_client = False
        self.finished = 0
        self.lock = threading.Lock()
        for source, target in ((client, server), (server, client)):
            chunks: SimpleQueue[tuple[float, float, bytes] | None] = SimpleQueue()
            for work, argument in ((self._read, source), (self._send, target)):
                threading.Thread(target=work, args=(argument, chunks), daemon=True).start()

    def _read(self, source: socket.socket, chunks: SimpleQueue[Any]) -> None:
        from_client = source is self.sockets[0]
        try:
            while data := source.recv(CHUNK):
                read = time.perf_counter()
                chunks.put((read + self.recorder.delay, read, data))
                if from_client and not self.last_read_from_client:
                    self.recorder.round_trips += 1
                self.last_read_from_client = from_client
        except OSError:
            pass
        chunks.put(None)

    def _send(self, target: socket.socket, chunks: SimpleQueue[Any]) -> None:
        recorder = self.recorder
        try:
            while (chunk := chunks.get()) is not None:
                due, read, data = chunk
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                sent = time.perf_counter()
                recorder.lateness.append(sent - due)
                recorder.achieved.append(sent - read)
                recorder.bytes += len(data)
                target.sendall(data)
            target.shutdown(socket.SHUT_WR)  # the other side's end, passed on in order
        except OSError:
            for each in self.sockets:  # a broken side ends both directions
                with contextlib.suppress(OSError):
                    each.shutdown(socket.SHUT_RDWR)
        with self.lock:
            self.finished += 1
            if self.finished == 2:
                for each in self.sockets:
                    each.close()


def _listen(target: tuple[str, int], recorder: Recorder) -> int:
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            try:
                server = socket.create_connection(target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for each in (client, server):
                each.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            recorder.connections += 1
            Connection(client, server, recorder)

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def serve(targets: list[tuple[str, int]], delay: float) -> None:
    """The proxies' process: a proxy for each target, then the commands on stdin."""
    # Inherited by every thread started after it: a sleep ends within microseconds of its time.
    ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    sys.setswitchinterval(0.0002)
    threading.stack_size(256 * 1024)
    recorder = Recorder(delay)
    ports = [_listen(target, recorder) for target in targets]
    print(json.dumps({"ports": ports}), flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "delay":
            recorder.delay = float(argument)
            print(json.dumps({"delay": recorder.delay}), flush=True)
        elif command == "figures":
            print(json.dumps(recorder.figures()), flush=True)
        else:
            break


class DelayProxies:
    """A proxy for each target, in a process of the proxies' own (see the module's doc)."""

    def __init__(self, targets: list[tuple[str, int]], delay: float = 0.0) -> None:
        self.targets = targets
        self.delay = delay
        self.ports: list[int] = []
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> DelayProxies:
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.delay",
                str(self.delay),
                *(f"{host}:{port}" for host, port in self.targets),
            ],
            cwd=BENCH,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ports = self._answer(None)["ports"]
        return self

    def _answer(self, command: str | None) -> dict[str, Any]:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise RuntimeError("the delay proxies are not running")
        if command is not None:
            process.stdin.write(command + "\n")
            process.stdin.flush()
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the delay proxies ended ({process.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds
        self._answer(f"delay {seconds!r}")

    def figures(self) -> dict[str, Any]:
        return self._answer("figures")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    serve(
        [(t.rpartition(":")[0], int(t.rpartition(":")[2])) for t in sys.argv[2:]],
        float(sys.argv[1]),
    )
