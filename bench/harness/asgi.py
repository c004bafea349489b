"""dealbase's ASGI app called in this process, without HTTP: the environment it is served with,
and one request sent to it. For the in-process benchmarks (bench/inprocess.py, bench/batches.py),
which measure what a request costs the server with no client or socket in the way."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.stack import GENEROUS_BURST, GENEROUS_RATE


def serving_settings(database: str, redis_url: str) -> dict[str, str]:
    """The environment of an in-process server: the settings of `make bench`'s (JSON access
    lines at info, Redis rate limits that never refuse) on ``database``."""
    return {
        "DEALBASE_DATABASE_URL": database,
        "DEALBASE_REDIS_URL": redis_url,
        "DEALBASE_LOG_FORMAT": "json",
        "DEALBASE_LOG_LEVEL": "info",
        "DEALBASE_RATE_LIMIT_KEY": GENEROUS_RATE,
        "DEALBASE_RATE_LIMIT_KEY_BURST": GENEROUS_BURST,
        "DEALBASE_RATE_LIMIT_TENANT": GENEROUS_RATE,
        "DEALBASE_RATE_LIMIT_TENANT_BURST": GENEROUS_BURST,
        "BASELINE_DATABASE_URL": database,
    }


def sized(headers: list[tuple[bytes, bytes]], body: bytes) -> list[tuple[bytes, bytes]]:
    """``headers`` with the content length of ``body``."""
    return [
        (name, str(len(body)).encode() if name == b"content-length" else value)
        for name, value in headers
    ]


async def request(
    app: Any,
    path: str,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    answer: list[bytes] | None = None,
    *,
    method: str | None = None,
) -> int:
    """``method`` (by default a POST of ``body``, a GET when ``body`` is empty) of ``path``,
    which may carry its query; its status. The response's body goes into ``answer`` when one
    is given."""
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method or ("POST" if body else "GET"),
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # the client never disconnects
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif answer is not None:
            answer.append(message.get("body", b""))

    await app(scope, receive, send)
    return status
