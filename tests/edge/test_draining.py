"""The notice a server gives its app as it begins to stop (``edge.draining``)."""

from __future__ import annotations

from dealbase.edge.draining import Draining


def test_what_is_registered_runs_once_when_draining_begins() -> None:
    draining, calls = Draining(), []
    draining.on_begin(lambda: calls.append("live"))

    draining.begin()
    draining.begin()

    assert (draining.begun, calls) == (True, ["live"])


def test_what_is_registered_after_the_beginning_runs_at_once() -> None:
    draining, calls = Draining(), []
    draining.begin()

    draining.on_begin(lambda: calls.append("late"))

    assert calls == ["late"]


def test_what_is_forgotten_before_the_beginning_does_not_run() -> None:
    draining, calls = Draining(), []
    forget = draining.on_begin(lambda: calls.append("stopped app"))
    draining.on_begin(lambda: calls.append("running app"))

    forget()
    draining.begin()

    assert calls == ["running app"]
