"""How server processes hear of each other's commits: a commit's schema is announced by NOTIFY
and heard on every process's LISTEN connection (``Notifications``, one per process here as in a
server); key changes are heard on the same connection; a lost connection comes back and has
every channel read on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg

from dealbase.db.database import Database, libpq_url
from dealbase.db.notifications import Notifications
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import repository as events_repository
from dealbase.platform.live.signals import Signals
from dealbase.platform.validation import validated
from dealbase.tenancy.callers.api_keys import KEY_CHANGES_CHANNEL
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld

WAIT_SECONDS = 10.0


def _write_customer(database: Database, scope: Scope) -> None:
    with database.unit_of_work(scope) as uow:
        customers.create(uow, validated(CustomerFields, {"last_name": "Announced"}))


def _signals(
    database_url: str,
    on_events: Callable[[str | None], None],
    on_key_change: Callable[[str], None],
) -> tuple[Signals, Notifications]:
    """Signals on a LISTEN connection of their own, as a process of their own would hold."""
    listening = Notifications(database_url)
    return Signals(listening, on_events, on_key_change), listening


async def _started(signals: Signals, listening: Notifications) -> None:
    await signals.start()
    listening.start(wait_seconds=0)


async def _stopped(signals: Signals, listening: Notifications) -> None:
    await signals.stop()
    await asyncio.to_thread(listening.stop)


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_SECONDS):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_commit_of_events_is_heard_by_the_listener_of_another_process(
    database: Database, database_url: str, world: TenantWorld
) -> None:
    scope = Scope.for_tenant(world.tenant.id).in_department(world.department.id)

    async def main() -> tuple[list[str | None], bool]:
        heard: list[str | None] = []
        writer = _signals(database_url, lambda schema: None, lambda payload: None)
        other = _signals(database_url, heard.append, lambda payload: None)
        await _started(*writer)
        await _started(*other)
        # The other process commits nothing itself: only the writer's announcement reaches it.
        events_repository.committed_listeners.remove(other[0].committed)
        try:
            await asyncio.wait_for(other[0].listening.wait(), WAIT_SECONDS)
            heard.clear()
            await asyncio.to_thread(_write_customer, database, scope)
            await _until(lambda: scope.schema in heard)
        finally:
            await _stopped(*writer)
            await _stopped(*other)
        return heard, writer[0].committed in events_repository.committed_listeners

    heard, still_told = asyncio.run(main())
    # Other apps of this test process may announce the same commit too: heard once or more.
    assert set(heard) - {None} == {scope.schema}
    assert not still_told


def test_key_changes_are_heard_on_the_same_connection(database_url: str) -> None:
    async def main() -> list[str]:
        changes: list[str] = []
        signals, listening = _signals(database_url, lambda schema: None, changes.append)
        await _started(signals, listening)
        try:
            await asyncio.wait_for(signals.listening.wait(), WAIT_SECONDS)
            with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
                connection.execute("SELECT pg_notify(%s, 'tenant:x')", (KEY_CHANGES_CHANNEL,))
            await _until(lambda: bool(changes))
        finally:
            await _stopped(signals, listening)
        return changes

    assert asyncio.run(main()) == ["tenant:x"]


def test_after_the_listen_connection_is_lost_it_comes_back_and_every_channel_reads_on(
    database_url: str,
) -> None:
    async def main() -> list[str | None]:
        heard: list[str | None] = []
        signals, listening = _signals(database_url, heard.append, lambda payload: None)
        await _started(signals, listening)
        try:
            await asyncio.wait_for(signals.listening.wait(), WAIT_SECONDS)
            heard.clear()
            with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
                connection.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'dealbase-listener'"
                    " AND datname = current_database()"
                )
            await _until(lambda: None in heard)
        finally:
            await _stopped(signals, listening)
        return heard

    assert asyncio.run(main()) == [None]
