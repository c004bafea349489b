"""How ``dealbase serve`` runs uvicorn, so that stopping it drops no request.

On SIGTERM each uvicorn worker stops accepting, lets the requests in progress finish (within
``DEALBASE_SHUTDOWN_TIMEOUT_SECONDS``) answering them with ``Connection: close``, and stops. Two
gaps let requests that had reached the server go unanswered (a connection reset); the test of
four clients looping POSTs through a SIGTERM (tests/ops/test_serve.py) saw 4 resets with
neither closed, 1 in 3 of 4 runs with only the second closed, none in 8 with both:

- With several workers, the serving process holds the listening socket too, and ``uvicorn.run``
  kept it open until its workers had stopped: the kernel went on completing connections no
  process would accept (a client reconnecting after ``Connection: close``), and reset them when
  the process exited. ``ClosingSupervisor`` closes its copy before it stops the workers.
- A worker closes every idle keep-alive connection at once, and a client that sent its next
  request a moment earlier has it reset. ``DrainingHttpToolsProtocol`` gives an idle connection
  ``DRAIN_SECONDS`` to deliver such a request, serves it with ``Connection: close``, then closes.
"""

from __future__ import annotations

import socket
from typing import Any

from uvicorn import Config, Server
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors.multiprocess import Multiprocess

# Longer than a client takes between a response and its next request on the same connection.
DRAIN_SECONDS = 1.0


class DrainingHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._draining = False

    def shutdown(self) -> None:
        self._draining = True
        if self.cycle is None or self.cycle.response_complete:
            # The keep-alive timer's slot: data arriving cancels it, as it does the timer.
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                DRAIN_SECONDS, self.timeout_keep_alive_handler
            )
        else:
            self.cycle.keep_alive = False

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False


class ClosingSupervisor(Multiprocess):
    def handle_term(self) -> None:
        for sock in self.sockets:
            # Shut down, not only closed: the socket stops listening for every process at once.
            # Closed, it went on listening while any worker still held it (one slower to stop
            # than another), and a client reconnecting to it then was reset.
            sock.shutdown(socket.SHUT_RD)
            sock.close()
        super().handle_term()


def run(config: Config) -> None:
    """Serves ``config`` as ``uvicorn.run`` does: in this process, or in ``config.workers``
    worker processes under ``ClosingSupervisor``."""
    config.http = DrainingHttpToolsProtocol
    if config.workers > 1:
        ClosingSupervisor(config, sockets=[config.bind_socket()]).run()
    else:
        Server(config).run()
