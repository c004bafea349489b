"""JSON logs: one JSON object a line, whatever the values an event carries; a client's faults
that the server logs (invalid UTF-8) at info, without a traceback, at most one a second."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from dealbase.ops import observability
from dealbase.ops.observability import configure_logging, log_request


@pytest.fixture
def render(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The renderer JSON logs are configured with (the last of structlog's processors)."""
    monkeypatch.setattr(observability, "_json_lines", observability._json_lines)
    handlers = logging.getLogger().handlers
    configure_logging("json", "info")
    yield structlog.get_config()["processors"][-1]
    structlog.reset_defaults()
    logging.getLogger().handlers = handlers


def test_an_event_with_values_orjson_refuses_is_still_one_json_line(render: Any) -> None:
    plain = render(None, "info", {"event": "plain", "count": 3, "who": "Ada"})
    odd = render(None, "info", {"event": "odd", "huge": 2**70, "by_number": {1: "one"}})

    assert "\n" not in plain + odd
    assert json.loads(plain) == {"event": "plain", "count": 3, "who": "Ada"}
    assert json.loads(odd) == {"event": "odd", "huge": 2**70, "by_number": {"1": "one"}}


class _Writes:
    """A stream that records each write it is given."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@contextmanager
def _json_logs(monkeypatch: pytest.MonkeyPatch, level: str) -> Iterator[_Writes]:
    """JSON logs at ``level`` written to a stream that records each write; the logging as it
    was afterwards."""
    stream = _Writes()
    monkeypatch.setattr("sys.stderr", stream)
    # configure_logging sets where access lines go: back as it was when the test ends.
    monkeypatch.setattr(observability, "_json_lines", observability._json_lines)
    handlers = logging.getLogger().handlers
    configure_logging("json", level)
    try:
        yield stream
    finally:
        structlog.reset_defaults()
        structlog.contextvars.clear_contextvars()
        logging.getLogger().handlers = handlers


def test_each_line_is_written_whole_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line written in two parts (the line, then its end) lets a line another thread writes
    meanwhile land between them: two JSON objects on one line."""
    with _json_logs(monkeypatch, "info") as stream:
        structlog.get_logger("dealbase.test").info("request", status=201)
        # A library's logger, through the root's handler (a name no other test configures).
        logging.getLogger("a_library.of_the_test").warning("started")

    assert len(stream.writes) == 2
    assert all(write.endswith("\n") and write.count("\n") == 1 for write in stream.writes)
    assert [json.loads(write)["event"] for write in stream.writes] == ["request", "started"]


@pytest.fixture
def json_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Writes]:
    """JSON logs at ``info`` written to a stream that records each write."""
    with _json_logs(monkeypatch, "info") as stream:
        yield stream


def test_an_access_line_is_the_line_structlog_writes_for_the_same_event(
    json_lines: _Writes,
) -> None:
    fields = {"method": "POST", "route": "/customers", "status": 201, "duration_ms": 1.5}
    structlog.contextvars.bind_contextvars(request_id="r-1", graphql_root_fields={"deals": "x"})

    log_request(dict(fields))
    structlog.get_logger("dealbase.access").info("request", **fields)

    direct, through_structlog = (json.loads(line) for line in json_lines.writes)
    assert direct.pop("timestamp") <= through_structlog.pop("timestamp")
    assert direct == through_structlog
    assert direct["request_id"] == "r-1"
    assert direct["level"] == "info"


def test_an_access_line_stamps_the_time_in_utc_to_the_microsecond(json_lines: _Writes) -> None:
    before = datetime.now(UTC)
    log_request({"status": 200})
    after = datetime.now(UTC)

    [line] = json_lines.writes
    stamped = json.loads(line)["timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", stamped)
    assert before <= datetime.fromisoformat(stamped) <= after


def test_no_access_line_is_written_above_info(monkeypatch: pytest.MonkeyPatch) -> None:
    with _json_logs(monkeypatch, "warning") as stream:
        log_request({"status": 200})

    assert stream.writes == []


INVALID_UTF8 = "Invalid UTF-8 sequence received from client."
# A record's time, in seconds since the epoch: the filter reads it, not the wall clock.
FIRST_AT = 1_800_000_000.0


def _server_error(message: str, created: float) -> logging.LogRecord:
    """A record as uvicorn's ``logger.exception`` makes it: at error, with the exception."""
    try:
        b"\xff".decode()
    except UnicodeDecodeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, None, exc_info)
    record.created = created
    return record


def test_invalid_utf8_from_a_client_passes_at_info_without_traceback_once_a_second() -> None:
    faults = observability.ClientFaults(logging.INFO)
    first = _server_error(INVALID_UTF8, FIRST_AT)
    too_soon = _server_error(INVALID_UTF8, FIRST_AT + 0.5)
    next_second = _server_error(INVALID_UTF8, FIRST_AT + 1.2)

    assert faults.filter(first)
    assert (first.levelno, first.levelname) == (logging.INFO, "INFO")
    assert (first.exc_info, first.exc_text) == (None, None)
    assert first.getMessage() == INVALID_UTF8
    assert not faults.filter(too_soon)
    assert faults.filter(next_second)
    assert next_second.getMessage() == f"{INVALID_UTF8} (1 more left out of the log)"
    assert (next_second.levelno, next_second.exc_info) == (logging.INFO, None)


def test_other_server_errors_pass_the_client_faults_filter_untouched() -> None:
    faults = observability.ClientFaults(logging.INFO)
    assert faults.filter(_server_error(INVALID_UTF8, FIRST_AT))
    other = _server_error("Exception in ASGI application", FIRST_AT + 0.1)
    exc_info = other.exc_info

    assert faults.filter(other)
    assert (other.levelno, other.levelname) == (logging.ERROR, "ERROR")
    assert other.exc_info is exc_info
    assert other.getMessage() == "Exception in ASGI application"


def test_above_info_no_invalid_utf8_from_a_client_is_logged() -> None:
    faults = observability.ClientFaults(logging.WARNING)
    at = [FIRST_AT, FIRST_AT + 0.5, FIRST_AT + 1.2, FIRST_AT + 60]

    assert [faults.filter(_server_error(INVALID_UTF8, created)) for created in at] == [False] * 4
