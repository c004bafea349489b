"""JSON logs: one JSON object a line, whatever the values an event carries."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from dealbase.ops.observability import configure_logging


@pytest.fixture
def render() -> Iterator[Any]:
    """The renderer JSON logs are configured with (the last of structlog's processors)."""
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


def test_each_line_is_written_whole_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line written in two parts (the line, then its end) lets a line another thread writes
    meanwhile land between them: two JSON objects on one line."""
    stream = _Writes()
    monkeypatch.setattr("sys.stderr", stream)
    handlers = logging.getLogger().handlers
    configure_logging("json", "info")
    try:
        structlog.get_logger("dealbase.test").info("request", status=201)
        # A library's logger, through the root's handler (a name no other test configures).
        logging.getLogger("a_library.of_the_test").warning("started")
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers = handlers

    assert len(stream.writes) == 2
    assert all(write.endswith("\n") and write.count("\n") == 1 for write in stream.writes)
    assert [json.loads(write)["event"] for write in stream.writes] == ["request", "started"]
