"""When the live connections' objects are frozen out of the garbage collector's way, and when
what was frozen is collected again (``live.Freezing``), with a collector that records calls."""

from __future__ import annotations

from typing import Any

from dealbase.graphql_api.live.freezing import Freezing


class Collector:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*arguments: Any) -> None:
            self.calls.append((name, arguments))

        return call


def test_connections_are_frozen_once_enough_have_opened_and_none_for_a_while() -> None:
    collector = Collector()
    freezing = Freezing(after_opened=3, settle_seconds=1.0, collector=collector)
    for _ in range(2):
        freezing.opened(10.0)
    assert freezing.tick(20.0, 2) is None
    freezing.opened(10.5)
    assert freezing.tick(11.0, 3) is None, "one opened half a second ago: not settled"
    assert collector.calls == []
    assert freezing.tick(11.5, 3) == "frozen"
    assert collector.calls == [("collect", (1,)), ("freeze", ())]
    assert freezing.tick(30.0, 3) is None, "nothing new to freeze"


def test_what_was_frozen_is_collected_once_more_connections_closed_than_remain() -> None:
    collector = Collector()
    freezing = Freezing(after_opened=3, settle_seconds=1.0, collector=collector)
    for _ in range(10):
        freezing.opened(0.0)
    assert freezing.tick(5.0, 10) == "frozen"
    collector.calls.clear()
    for _ in range(5):
        freezing.closed()
    assert freezing.tick(6.0, 5) is None, "as many open as closed"
    freezing.closed()
    assert freezing.tick(7.0, 4) == "refrozen"
    assert collector.calls == [("unfreeze", ()), ("collect", ()), ("freeze", ())]
    assert freezing.tick(8.0, 4) is None


def test_a_few_connections_closing_never_unfreeze() -> None:
    collector = Collector()
    freezing = Freezing(after_opened=100, settle_seconds=1.0, collector=collector)
    freezing.opened(0.0)
    freezing.closed()
    assert freezing.tick(5.0, 0) is None
    assert collector.calls == []
