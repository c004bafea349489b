"""Synchronous platform code run on the event loop, in greenlets kept for the next call.

A unit of work's code is synchronous; its statements await on the event loop through
SQLAlchemy's ``await_``, which hands each awaitable from the greenlet running the code to the
greenlet driving it (the event loop's). SQLAlchemy's ``greenlet_spawn`` makes a new greenlet for
every call, which costs several times what running the call in a greenlet made before does. Each
thread keeps the greenlets its calls have finished with, since a greenlet runs only in the
thread that made it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from greenlet import getcurrent, greenlet

T = TypeVar("T")

# Greenlets a thread keeps for its next calls, at most: as many as units of work run at once.
MAX_KEPT = 256


class _Finished:
    """What a greenlet hands its driver when the call returned or raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any, error: BaseException | None) -> None:
        self.value = value
        self.error = error


class _CallGreenlet(greenlet):  # type: ignore[misc]
    """Runs one call after another, each driven by whoever switched to it last."""

    # What SQLAlchemy's ``await_`` asks of the greenlet it runs in.
    __sqlalchemy_greenlet_provider__ = True

    def __init__(self) -> None:
        super().__init__(self._serve)

    def _serve(self, work: Callable[..., Any], arguments: tuple[Any, ...]) -> None:
        while True:
            try:
                finished = _Finished(work(*arguments), None)
            except BaseException as error:  # handed to the driver, which raises it
                finished = _Finished(None, error)
            # Dropped before waiting for the next call: nothing of this one stays referenced.
            work = arguments = None  # type: ignore[assignment]
            work, arguments = self.parent.switch(finished)


_kept = threading.local()


async def run_in_greenlet(work: Callable[..., T], *arguments: Any) -> T:
    """``work(*arguments)``, its ``await_`` calls awaited here, in this task's context."""
    try:
        kept: list[_CallGreenlet] = _kept.greenlets
    except AttributeError:
        kept = _kept.greenlets = []
    runner = kept.pop() if kept else _CallGreenlet()
    driver = getcurrent()
    runner.parent = driver
    # The task's context variables, as SQLAlchemy's greenlets have them.
    runner.gr_context = driver.gr_context
    message = runner.switch(work, arguments)
    while not isinstance(message, _Finished):
        try:
            value = await message
        except BaseException:
            message = runner.throw(*sys.exc_info())
        else:
            message = runner.switch(value)
    if len(kept) < MAX_KEPT:
        # The finished task's context is not kept alive by a greenlet waiting for its next call.
        runner.gr_context = None
        kept.append(runner)
    if message.error is not None:
        raise message.error
    return cast(T, message.value)
