"""A key's last use: noted in memory by authentication, written later in batches, never lost to
a database that is down for a while, and written once more when the server stops."""

from __future__ import annotations

import asyncio
import itertools
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
from dealbase.migrations.runner import upgrade_control
from dealbase.tenancy.callers import api_keys as api_keys_module
from dealbase.tenancy.callers.api_keys import record_uses
from dealbase.tenancy.callers.key_usage import FLUSH_INTERVAL_SECONDS, KeyUseRecorder
from dealbase.tenancy.database.connections import Database, DatabaseLimits
from dealbase.tenancy.database.control_tables import api_keys, tenants
from tests.support import TenantWorld, scratch_database

CUSTOMERS = "/api/v1/integration/customers"


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


# Flushes every 0.5 s counted over 1.8 s of the machine's clock.
@pytest.mark.serial
def test_periodic_flushes_write_each_key_at_most_once_an_interval(
    database: Database, world: TenantWorld
) -> None:
    """A key used every 20 ms for 1.8 s, flushed every 0.5 s: the values written are the last
    uses before each flush, so two in a row lie an interval apart."""
    interval = 0.5
    recorder = KeyUseRecorder(database, flush_interval_seconds=interval)

    async def use_and_watch() -> list[datetime]:
        flusher = asyncio.create_task(recorder.flush_periodically())
        seen: list[datetime] = []
        deadline = time.monotonic() + 1.8
        try:
            while time.monotonic() < deadline:
                recorder.note(world.key.key_id)
                value = await to_thread.run_sync(last_used_at, database, world.key.key_id)
                if value is not None and (not seen or value != seen[-1]):
                    seen.append(value)
                await asyncio.sleep(0.02)
        finally:
            flusher.cancel()
        return seen

    written = asyncio.run(use_and_watch())

    assert 2 <= len(written) <= 4, written
    gaps = [later - earlier for earlier, later in itertools.pairwise(written)]
    assert all(gap >= timedelta(seconds=interval - 0.1) for gap in gaps), gaps


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
