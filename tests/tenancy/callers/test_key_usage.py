"""A key's last use: noted in memory by authentication, written later in batches, never lost to
a database that is down for a while, and written once more when the server stops."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from anyio import to_thread
from fastapi.testclient import TestClient
from psycopg import sql
from sqlalchemy import insert, select
from structlog.testing import capture_logs

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database, DatabaseLimits
from dealbase.migrations.runner import upgrade_control
from dealbase.tenancy.callers import api_keys as api_keys_module
from dealbase.tenancy.callers.key_usage import FLUSH_INTERVAL_SECONDS, KeyUseRecorder, record_uses
from dealbase.tenancy.control_tables import api_keys, tenants
from tests.support import TenantWorld, scratch_database

CUSTOMERS = "/api/v1/integration/customers"
# How long a flush may take before the test fails: a bound for failing, not a margin to pass.
FLUSH_TIMEOUT_S = 10.0


def last_used_at(database: Database, key_id: uuid.UUID) -> datetime | None:
    with database.control() as connection:
        value: datetime | None = connection.execute(
            select(api_keys.c.last_used_at).where(api_keys.c.id == key_id)
        ).scalar_one()
        return value


def test_the_default_interval_is_a_minute(database: Database) -> None:
    assert KeyUseRecorder(database).flush_interval_seconds == FLUSH_INTERVAL_SECONDS == 60.0


def test_a_request_notes_its_keys_use_and_the_server_writes_it_when_it_stops(
    settings: Settings, database: Database, world: TenantWorld
) -> None:
    before = datetime.now(UTC)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.post(CUSTOMERS, json={"last_name": "Used"}, headers=world.key.headers)
        assert response.status_code == 201, response.text
        # Off the request's path: nothing is written until the next flush, a minute away.
        assert last_used_at(database, world.key.key_id) is None

    used = last_used_at(database, world.key.key_id)
    assert used is not None
    assert before <= used <= datetime.now(UTC)


def test_a_refused_request_is_not_a_use(
    settings: Settings, database: Database, world: TenantWorld
) -> None:
    wrong_secret = world.key.api_key[:-1] + ("B" if world.key.api_key[-1] != "B" else "C")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        headers = {**world.key.headers, "X-Api-Key": wrong_secret}
        assert client.post(CUSTOMERS, json={"last_name": "x"}, headers=headers).status_code == 401

    assert last_used_at(database, world.key.key_id) is None


def test_periodic_flushes_write_each_keys_last_use_once_an_interval(
    database: Database, world: TenantWorld
) -> None:
    """The flusher waits out an interval, then writes the last use noted before it: uses noted
    meanwhile wait for the end of the interval, and an interval without one writes nothing.
    Its waits and the uses' moments are the test's, which ends each wait when it means to."""
    interval = 0.5
    # The moments of the three uses the test notes, in turn.
    uses = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n) for n in range(3)]
    waits: list[float] = []
    written: list[datetime | None] = []

    async def scenario() -> None:
        ends = asyncio.Queue[None]()

        async def wait(seconds: float) -> None:
            waits.append(seconds)
            await ends.get()

        async def end_the_interval() -> None:
            """Ends the flusher's wait; returns once it is waiting again (its flush done)."""
            waiting = len(waits)
            ends.put_nowait(None)
            deadline = time.monotonic() + FLUSH_TIMEOUT_S
            while len(waits) == waiting:
                assert time.monotonic() < deadline, f"no flush ended in {FLUSH_TIMEOUT_S} s"
                await asyncio.sleep(0.01)

        recorder = KeyUseRecorder(
            database, flush_interval_seconds=interval, now=iter(uses).__next__, sleep=wait
        )
        flusher = asyncio.create_task(recorder.flush_periodically())
        try:
            while not waits:
                await asyncio.sleep(0)
            recorder.note(world.key.key_id)  # uses[0]
            recorder.note(world.key.key_id)  # uses[1]
            written.append(await to_thread.run_sync(last_used_at, database, world.key.key_id))
            await end_the_interval()
            written.append(await to_thread.run_sync(last_used_at, database, world.key.key_id))
            await end_the_interval()  # no use in this interval
            written.append(await to_thread.run_sync(last_used_at, database, world.key.key_id))
            recorder.note(world.key.key_id)  # uses[2]
            written.append(await to_thread.run_sync(last_used_at, database, world.key.key_id))
            await end_the_interval()
            written.append(await to_thread.run_sync(last_used_at, database, world.key.key_id))
        finally:
            flusher.cancel()

    asyncio.run(scenario())

    assert written == [None, uses[1], uses[1], uses[1], uses[2]]
    assert waits == [interval] * 4


def test_record_uses_never_moves_a_last_use_back_and_skips_unknown_keys(
    database: Database, world: TenantWorld
) -> None:
    later = datetime.now(UTC)
    earlier = later - timedelta(minutes=5)

    with database.control() as connection:
        record_uses(connection, {world.key.key_id: later, uuid.uuid4(): later})
    with database.control() as connection:
        record_uses(connection, {world.key.key_id: earlier})

    assert last_used_at(database, world.key.key_id) == later


@pytest.fixture
def own_database(postgres_server: str) -> Iterator[tuple[str, uuid.UUID]]:
    """A database of the test's own, its control schema at head, holding one key: the test may
    refuse every connection to it. Yields its URL and the key's id."""
    with scratch_database(postgres_server, "key_uses") as url:
        setup = Database(url, pool_size=1)
        tenant_id = uuid.uuid4()
        with setup.control() as connection:
            upgrade_control(connection)
            connection.execute(
                insert(tenants).values(
                    id=tenant_id,
                    name="key uses",
                    schema_name="t_key_uses",
                    created_at=datetime.now(UTC),
                )
            )
            issued = api_keys_module.issue_key(connection, tenant_id, None, None, actor="test")
        setup.dispose()
        yield url, issued.key_id


def _allow_connections(server: str, url: str, allowed: bool) -> None:
    name = url.partition("?")[0].rpartition("/")[2]
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.Literal(allowed)
            )
        )
        if not allowed:
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )


def test_a_flush_while_the_database_is_down_keeps_the_uses_for_the_next_one(
    postgres_server: str, own_database: tuple[str, uuid.UUID]
) -> None:
    url, key_id = own_database
    database = Database(url, pool_size=1, limits=DatabaseLimits(acquire_timeout_seconds=1))
    recorder = KeyUseRecorder(database)
    try:
        recorder.note(key_id)
        noted_by = datetime.now(UTC)
        _allow_connections(postgres_server, url, False)
        try:
            with capture_logs() as logs:
                assert recorder.flush() is False
        finally:
            _allow_connections(postgres_server, url, True)

        assert [entry["event"] for entry in logs] == ["key_uses_not_recorded"]
        assert logs[0]["keys"] == 1
        assert recorder.flush() is True
        used = last_used_at(database, key_id)
        assert used is not None and used <= noted_by
    finally:
        database.dispose()
