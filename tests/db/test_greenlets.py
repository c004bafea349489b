"""run_in_greenlet: synchronous code whose await_ calls are awaited by the calling task, in
greenlets kept for the next call."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

import pytest
from greenlet import getcurrent
from sqlalchemy.util import await_

from dealbase.db.greenlets import run_in_greenlet

REQUEST: ContextVar[str] = ContextVar("request", default="none")


async def _answer(value: int, delay: float = 0.0) -> int:
    await asyncio.sleep(delay)
    return value


def _add_awaited(a: int, b: int, delay: float = 0.0) -> int:
    return await_(_answer(a, delay)) + await_(_answer(b, delay))


def test_the_work_returns_what_its_awaits_give_and_its_greenlet_runs_the_next_call() -> None:
    async def twice() -> tuple[int, int, bool]:
        first = await run_in_greenlet(_add_awaited, 1, 2)
        runner = await run_in_greenlet(getcurrent)
        second = await run_in_greenlet(_add_awaited, 3, 4)
        return first, second, runner is await run_in_greenlet(getcurrent)

    assert asyncio.run(twice()) == (3, 7, True)


def test_an_error_of_the_work_or_of_what_it_awaits_is_raised_to_the_caller() -> None:
    def fails_after_awaiting() -> None:
        await_(_answer(1))
        raise KeyError("after")

    async def failing() -> None:
        raise LookupError("awaited")

    def catches(kind: type[BaseException]) -> str:
        try:
            await_(failing())
        except kind as error:
            return f"caught {error}"
        return "not raised"

    async def calls() -> str:
        with pytest.raises(KeyError, match="after"):
            await run_in_greenlet(fails_after_awaiting)
        with pytest.raises(LookupError, match="awaited"):
            await run_in_greenlet(await_, failing())
        return await run_in_greenlet(catches, LookupError)

    assert asyncio.run(calls()) == "caught awaited"


def test_the_work_sees_and_sets_the_calling_tasks_context_variables() -> None:
    def read_and_set() -> str:
        seen = REQUEST.get()
        REQUEST.set("set by the work")
        return seen

    async def in_task(name: str) -> tuple[str, str]:
        REQUEST.set(name)
        seen = await run_in_greenlet(read_and_set)
        return seen, REQUEST.get()

    async def tasks() -> list[tuple[str, str]]:
        return list(await asyncio.gather(in_task("a"), in_task("b")))

    assert asyncio.run(tasks()) == [("a", "set by the work"), ("b", "set by the work")]


def test_calls_of_many_tasks_interleave_on_their_own_greenlets() -> None:
    async def many() -> list[int]:
        return await asyncio.gather(
            *(run_in_greenlet(_add_awaited, n, n, 0.001 * (n % 3)) for n in range(50))
        )

    assert asyncio.run(many()) == [2 * n for n in range(50)]


def test_a_cancelled_caller_cancels_the_work_and_its_greenlet_serves_again() -> None:
    cleaned: list[str] = []
    waiting = asyncio.Event()

    async def never_answered() -> int:
        waiting.set()
        await asyncio.Event().wait()
        return 1

    def waits() -> int:
        try:
            return await_(never_answered())
        finally:
            cleaned.append("finally ran")

    async def cancel_then_call() -> int:
        task = asyncio.create_task(run_in_greenlet(waits))
        await waiting.wait()  # the work is in its await_, not merely scheduled
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await run_in_greenlet(_add_awaited, 20, 22)

    assert asyncio.run(cancel_then_call()) == 42
    assert cleaned == ["finally ran"]
