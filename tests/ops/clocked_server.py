"""uvicorn serving in a thread of the test on an event loop whose clock only the test moves
(``tests.support.LoopClock``): the server's timers fire when the test moves the clock past
them, never because the machine was slow. The loop is asyncio's own (uvloop's clock cannot be
moved); the protocols under test schedule their timers through the loop either way."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from uvicorn import Config, Server

from tests.support import LoopClock

# Failure bounds only.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@contextmanager
def served_on_a_clock(
    config: Config,
    loop_clock: LoopClock,
    server: Server | None = None,
    sockets: list[socket.socket] | None = None,
) -> Iterator[Server]:
    """``config`` served by ``server`` (uvicorn's own by default) on ``sockets`` (else those it
    binds) until the block ends; yields the started server."""
    server = server or Server(config)

    def serve() -> None:
        with asyncio.Runner(loop_factory=loop_clock.new_loop) as runner:
            runner.run(server.serve(sockets))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        assert thread.is_alive(), "the server stopped while starting"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.should_exit = True
        # The server looks at should_exit, and gives its connections their time to end, by
        # its loop's clock.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while thread.is_alive():
            assert time.monotonic() < deadline, "the server did not stop"
            loop_clock.advance(0.5)
            thread.join(0.01)
