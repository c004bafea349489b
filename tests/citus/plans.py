"""How Citus plans the statements units of work send to a distributed schema. Each should run
as one task on the tenant's worker, routed whole: no subplan, no intermediate result, no rows
pulled through the coordinator (``EXPLAIN`` of each, with its values, on the coordinator)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dealbase.db import transactions

_TENANT_SCHEMA = re.compile(r'"?t_[0-9a-f]{32}"?\.')


@dataclass(frozen=True)
class Sent:
    """A statement a unit of work sent, with one set of its values."""

    sql: str
    values: tuple[Any, ...]


@contextmanager
def statements_sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Sent]]:
    """The statements units of work send meanwhile, in order."""
    sent: list[Sent] = []
    alone, on_the_loop = transactions._round_trip, transactions._round_trip_async

    def note(calls: list[Any]) -> None:
        sent.extend(
            Sent(call.sql.decode(), tuple(values)) for call in calls for values in call.values
        )

    def recorded(connection: Any, calls: list[Any]) -> Any:
        note(calls)
        return alone(connection, calls)

    async def recorded_on_the_loop(connection: Any, calls: list[Any]) -> Any:
        note(calls)
        return await on_the_loop(connection, calls)

    with monkeypatch.context() as patched:
        patched.setattr(transactions, "_round_trip", recorded)
        patched.setattr(transactions, "_round_trip_async", recorded_on_the_loop)
        yield sent


def _faults(plan: dict[str, Any]) -> list[str]:
    """What keeps a plan from being one task routed whole."""
    node = plan["Plan"]
    provider = node.get("Custom Plan Provider")
    if provider is None:
        return ["runs on the coordinator"]
    faults = []
    if provider != "Citus Adaptive":
        faults.append(f"{provider} ({node.get('INSERT/SELECT method')})")
    query = node.get("Distributed Query", {})
    if query.get("Subplans"):
        faults.append(f"{len(query['Subplans'])} subplans")
    tasks = query.get("Job", {}).get("Task Count")
    if tasks != 1:
        faults.append(f"{tasks} tasks")
    return faults


def not_routed_whole(url: str, sent: list[Sent]) -> dict[str, list[str]]:
    """Each statement of ``sent`` that names a tenant schema and is not one task routed whole
    to its worker, with what is wrong with its plan. Planned in a transaction rolled back, so
    that a statement's stable functions (``current_setting``...) see what they would."""
    wrong: dict[str, list[str]] = {}
    with psycopg.connect(url, autocommit=True) as connection:
        cursor = psycopg.RawCursor(connection)
        for each in sent:
            if each.sql in wrong or not _TENANT_SCHEMA.search(each.sql):
                continue
            try:
                with connection.transaction(force_rollback=True):
                    cursor.execute("SELECT set_config('dealbase.event_sequence', '1', true)")
                    cursor.execute("EXPLAIN (FORMAT JSON) " + each.sql, each.values or None)
                    row = cursor.fetchone()
            except psycopg.Error as error:
                # Citus cannot explain every statement it pulls through the coordinator (the
                # values of its subplans go missing): no plan of one task, either.
                wrong[each.sql] = [f"EXPLAIN failed: {error}"]
                continue
            assert row is not None
            faults = _faults(row[0][0])
            if faults:
                wrong[each.sql] = faults
    return wrong


def assert_routed_whole(url: str, sent: list[Sent]) -> None:
    """Every statement of ``sent`` that names a tenant schema is routed whole."""
    assert sent, "no statement was recorded"
    wrong = {
        _TENANT_SCHEMA.sub("", sql)[:500]: faults
        for sql, faults in not_routed_whole(url, sent).items()
    }
    assert wrong == {}, f"not routed whole: {wrong}"
