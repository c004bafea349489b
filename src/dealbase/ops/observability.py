"""Structured logs: JSON for machines, console for people, one configuration per process.

structlog renders the service's own events; the standard library's loggers (uvicorn's start-up,
shutdown and errors, psycopg's pool, Alembic) go through the same processors and renderer, so a
JSON log is JSON on every line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

# Libraries chatty at INFO: psycopg's pool (each connection it hands out), pgserver (each command).
_QUIET = {"psycopg.pool": logging.WARNING, "pgserver": logging.WARNING}


def _json(value: Any, **options: Any) -> str:
    # orjson writes an access line (each request has one) many times faster than json.dumps;
    # what orjson refuses (an integer past 64 bits, a key that is not text) json.dumps writes.
    try:
        return orjson.dumps(value, default=options.get("default")).decode()
    except TypeError:
        return json.dumps(value, **options)


class _UtcClock:
    """Each line's ``timestamp``: ISO 8601 in UTC to the microsecond, its date and time of day
    written once a second: ``datetime.now(utc).isoformat()`` for every line cost an access line
    several times more."""

    def __init__(self) -> None:
        # The second and its text, in one attribute: threads other than the event loop's log
        # too, and each reads the pair it finds whole.
        self._second: tuple[int, str] = (-1, "")

    def now(self) -> str:
        now = time.time()
        second = int(now)
        known, written = self._second
        if second != known:
            written = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, written)
        return f"{written}.{int((now - second) * 1_000_000):06d}+00:00"

    def __call__(self, _: Any, __: str, event_dict: MutableMapping[str, Any]) -> Any:
        event_dict["timestamp"] = self.now()
        return event_dict


_clock = _UtcClock()


class _JsonLines:
    """The JSON format's output: what a line written straight to it (``log_request``) needs."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        # structlog's own writer of every line: one write a line, under its lock for the file.
        self.write = structlog.WriteLogger(sys.stderr).msg


_json_lines: _JsonLines | None = None
_requests = structlog.get_logger("dealbase.access")


def log_request(fields: dict[str, Any]) -> None:
    """Logs a request's access line, the event ``request`` with ``fields`` (which it takes).

    In the JSON format the line is written here, as the processors of every other line would
    write it (the context's values, ``level``, ``timestamp``; nothing for them to format):
    through structlog's bound logger and processors, each request's line cost several times
    what it costs written here.
    """
    lines = _json_lines
    if lines is None:
        _requests.info("request", **fields)
        return
    if lines.threshold > logging.INFO:
        return
    fields["event"] = "request"
    for name, value in structlog.contextvars.get_contextvars().items():
        fields.setdefault(name, value)
    fields["level"] = "info"
    fields["timestamp"] = _clock.now()
    lines.write(_json(fields))


class ClientFaults(logging.Filter):
    """The server's lines about what a client sent wrong (invalid UTF-8 in a WebSocket text
    frame, which the server closes 1007) are the client's fault, not the service's: written at
    info, without a traceback, and at most one a second (the next says how many were left out),
    so a client cannot fill the log with them."""

    MESSAGES = frozenset({"Invalid UTF-8 sequence received from client."})

    def __init__(self, threshold: int, every_seconds: float = 1.0) -> None:
        super().__init__()
        self.threshold = threshold
        self.every_seconds = every_seconds
        self._last = -every_seconds
        self._left_out = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in self.MESSAGES:
            return True
        if self.threshold > logging.INFO or record.created - self._last < self.every_seconds:
            self._left_out += 1
            return False
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.exc_info = record.exc_text = None
        if self._left_out:
            record.msg = f"{record.msg} ({self._left_out} more left out of the log)"
        self._last, self._left_out = record.created, 0
        return True


def configure_logging(log_format: str, level: str) -> None:
    global _json_lines
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json)
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    threshold = logging.getLevelName(level.upper())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        _clock,
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        # One write a line (PrintLogger makes two, the line and its end of line): a line the
        # standard library's handler writes meanwhile, from another thread (the LISTEN
        # connections' threads, uvicorn's), cannot land between them.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _configure_standard_loggers(shared, renderer, threshold)
    _json_lines = _JsonLines(threshold) if log_format == "json" else None


def _configure_standard_loggers(shared: list[Any], renderer: Any, threshold: int) -> None:
    """The standard library's loggers (uvicorn's, the libraries') write through the same
    processors and renderer as structlog's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(threshold)
    # uvicorn's loggers keep handlers of their own unless told otherwise: through the root.
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
    server_errors = logging.getLogger("uvicorn.error")
    server_errors.filters = [ClientFaults(threshold)]
    # The edge writes each request's access line (edge.request_edge). uvicorn writes one of its
    # own whenever its access logger has a handler, its parents' included: none, so a request
    # is one line, not two, the second being a cost of its own on every request.
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = False
    for name, quiet in _QUIET.items():
        logging.getLogger(name).setLevel(max(quiet, threshold))
