"""deploy/nginx/nginx.conf run by the machine's nginx in front of a real uvicorn, for the tests of
tests/deploy/test_proxy.py: the shipped file copied into the test's folder with only its
addresses, its writable paths and (when a test asks) its header timeout changed, and a small ASGI
app that records what reached it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn

from tests.support import free_port, stop_process

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "nginx.conf"
# Debian's (and Ubuntu's) smallest nginx; .ci/run installs it.
PACKAGE = "nginx-light"
# A failure bound only: how long anything may take before the test fails.
PATIENCE_S = 60.0
# How large the app lets a body be before it answers 413, as the API does past its cap.
APP_BODY_CAP = 1024 * 1024
# What the app answers a WebSocket with: its first message back, after this.
ECHOED = "echo: "

Scope = dict[str, Any]


def nginx_binary() -> str:
    """The nginx to run: a failure under CI (which installs it), else a skip naming the package."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        message = f"nginx is not installed (apt-get install -y {PACKAGE}): the proxy is untested"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def directive(name: str, text: str | None = None) -> list[str]:
    """The values of every ``name ...;`` directive of the shipped file (or of ``text``)."""
    source = CONFIG.read_text() if text is None else text
    return re.findall(rf"^\s*{re.escape(name)}\s+([^;]*);", source, flags=re.MULTILINE)


def _replaced(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced, which must be there: a substitution that finds nothing
    would leave the copy running something other than what the test means."""
    assert old in text, f"deploy/nginx/nginx.conf no longer has {old!r}"
    return text.replace(old, new)


def copy_for_test(
    directory: Path, *, port: int, metrics_port: int, app_port: int, header_timeout_s: int | None
) -> Path:
    """The shipped file with only these changed: where it listens, the API's address, its pid and
    temporary files under ``directory``, and (when given) the header timeout."""
    text = CONFIG.read_text()
    text = _replaced(text, "listen 8000 ", f"listen 127.0.0.1:{port} ")
    text = _replaced(text, "listen 9100;", f"listen 127.0.0.1:{metrics_port};")
    text = _replaced(text, "server dealbase:8001;", f"server 127.0.0.1:{app_port};")
    text = _replaced(text, "http://dealbase:9101;", f"http://127.0.0.1:{app_port};")
    text = _replaced(text, " /tmp/", f" {directory}/")
    if header_timeout_s is not None:
        text = _replaced(
            text, "client_header_timeout 10s;", f"client_header_timeout {header_timeout_s}s;"
        )
    copy = directory / "nginx.conf"
    copy.write_text(text)
    return copy


@dataclass
class App:
    """An ASGI app that records the scope of every request that reaches it and answers:
    ``/graphql/stream`` two Server-Sent Events, the second once ``release`` is set; ``/upload`` 413 past
    ``APP_BODY_CAP`` (it reads the body first); ``/graphql`` (a WebSocket) the first message
    back; anything else 200 with what it saw as JSON."""

    scopes: list[Scope] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        self.scopes.append(scope)
        if scope["type"] == "websocket":
            await self._echo(scope, receive, send)
            return
        received = 0
        while True:
            message = await receive()
            received += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        if scope["path"] == "/graphql/stream":
            await self._events(send)
        elif scope["path"] == "/upload" and received > APP_BODY_CAP:
            await _answer(send, 413, {"code": "payload_too_large", "received": received})
        else:
            await _answer(send, 200, _seen(scope, received))

    async def _events(self, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        await asyncio.to_thread(self.release.wait, PATIENCE_S)
        await send({"type": "http.response.body", "body": b"data: second\n\n"})

    async def _echo(self, scope: Scope, receive: Any, send: Any) -> None:
        await receive()  # websocket.connect
        await send({"type": "websocket.accept", "subprotocol": scope["subprotocols"][0]})
        message = await receive()
        await send({"type": "websocket.send", "text": ECHOED + message["text"]})
        await send({"type": "websocket.close", "code": 1000})


def _seen(scope: Scope, received: int) -> dict[str, Any]:
    headers = {name.decode(): value.decode() for name, value in scope["headers"]}
    return {"client": scope["client"][0], "headers": headers, "received": received}


async def _answer(send: Any, status: int, document: dict[str, Any]) -> None:
    body = orjson.dumps(document)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Proxied:
    """The proxy's address and the app behind it."""

    address: tuple[str, int]
    app: App
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop_gracefully(self) -> None:
        self.process.send_signal(signal.SIGQUIT)


@contextmanager
def served_app(app: App) -> Iterator[int]:
    """uvicorn in a thread serving ``app`` on the loopback, trusting the loopback's proxy
    headers (as ``dealbase serve`` does FORWARDED_ALLOW_IPS's); yields its port."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        lifespan="off",
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
    )
    listening = config.bind_socket()
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "uvicorn did not start")
        port: int = listening.getsockname()[1]
        yield port
    finally:
        server.should_exit = True
        thread.join(PATIENCE_S)
        listening.close()


@contextmanager
def running_nginx(config: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The machine's nginx on ``config``, in the foreground, until the block ends; returns once
    it accepts connections on ``port``."""
    command = [nginx_binary(), "-p", str(config.parent), "-c", str(config)]
    # -e: the error log before the configuration is read (Debian's default is a root's file).
    command += ["-e", "stderr", "-g", "daemon off;"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def accepting() -> bool:
            assert process.poll() is None, f"nginx exited: {log.read_text(errors='replace')}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(accepting, "nginx does not accept connections")
        yield process
    finally:
        # SIGTERM is nginx's fast stop; stop_process kills the group if it lingers.
        stop_process(process)


@contextmanager
def proxied(directory: Path, *, header_timeout_s: int | None = None) -> Iterator[Proxied]:
    """The shipped proxy in front of a recording app."""
    app = App()
    with served_app(app) as app_port:
        port = free_port()
        config = copy_for_test(
            directory,
            port=port,
            metrics_port=free_port(),
            app_port=app_port,
            header_timeout_s=header_timeout_s,
        )
        log = directory / "nginx.log"
        with running_nginx(config, port, log) as process:
            try:
                yield Proxied(("127.0.0.1", port), app, log, process)
            finally:
                app.release.set()


def wait_for(condition: Any, failure: str) -> None:
    """Returns once ``condition()`` holds; fails with ``failure`` after ``PATIENCE_S``."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)
