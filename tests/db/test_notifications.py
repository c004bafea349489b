"""The process's one LISTEN connection: every subscriber's channels on it, each notice to the
subscribers of its channel, each subscriber told when the connection is lost and when it is back;
and an app, with its key cache and its live hub, holds that one connection and no other."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database, libpq_url
from dealbase.db.notifications import APPLICATION_NAME, Notifications, Subscriber
from dealbase.ops import admin
from tests.graphql_api.live_support import CHANGES, LiveSocket, create_customer, live_socket
from tests.support import TenantWorld, build_tenant, migrated_scratch_database, wait_until

API = "/api/v1/integration"


def _backends(database_url: str, application_name: str) -> list[int]:
    """The pids of the connections of ``application_name`` that LISTEN, in this database."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND query LIKE 'LISTEN %%'",
            (application_name,),
        ).fetchall()
    return [pid for (pid,) in rows]


def _notify(database_url: str, channel: str, payload: str) -> None:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        connection.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def _terminate(database_url: str, pids: list[int]) -> None:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,)
        )


class _Told:
    """What one subscriber is told."""

    def __init__(self, *channels: str) -> None:
        self.notices: list[tuple[str, str]] = []
        self.ups = 0
        self.downs = 0
        self.subscriber = Subscriber(
            {channel: self._heard(channel) for channel in channels},
            on_up=self._up,
            on_down=self._down,
        )

    def _heard(self, channel: str) -> Callable[[str], None]:
        return lambda payload: self.notices.append((channel, payload))

    def _up(self) -> None:
        self.ups += 1

    def _down(self) -> None:
        self.downs += 1


def test_subscribers_share_one_connection_and_each_is_told_when_it_is_lost_and_back(
    database_url: str,
) -> None:
    name = f"dealbase-test-{uuid.uuid4().hex[:8]}"
    first_channel, shared, second_channel = (f"test_{uuid.uuid4().hex}" for _ in range(3))
    first, second = _Told(first_channel, shared), _Told(shared, second_channel)
    listening = Notifications(database_url, application_name=name)
    listening.subscribe(first.subscriber)
    listening.subscribe(second.subscriber)
    listening.start()
    try:
        wait_until(lambda: first.ups == second.ups == 1, "both are told the channels are heard")
        assert len(_backends(database_url, name)) == 1
        for channel in (first_channel, shared, second_channel):
            _notify(database_url, channel, "before")
        wait_until(lambda: len(first.notices) == len(second.notices) == 2, "each hears its own")
        assert first.notices == [(first_channel, "before"), (shared, "before")]
        assert second.notices == [(shared, "before"), (second_channel, "before")]

        lost = _backends(database_url, name)
        _terminate(database_url, lost)
        wait_until(lambda: first.ups == second.ups == 2, "both are told it is back")
        assert first.downs >= 1 and second.downs >= 1
        backends = _backends(database_url, name)
        assert len(backends) == 1 and backends != lost
        _notify(database_url, shared, "after")
        wait_until(
            lambda: (shared, "after") in first.notices and (shared, "after") in second.notices,
            "both hear after",
        )
    finally:
        listening.stop()
    assert first.downs == second.downs == first.ups == second.ups


def test_a_subscriber_that_comes_later_is_listened_for_on_the_same_connection(
    database_url: str,
) -> None:
    name = f"dealbase-test-{uuid.uuid4().hex[:8]}"
    early, late = _Told(f"test_{uuid.uuid4().hex}"), _Told(f"test_{uuid.uuid4().hex}")
    listening = Notifications(database_url, application_name=name)
    listening.subscribe(early.subscriber)
    listening.start()
    try:
        wait_until(lambda: early.ups == 1, "the first is heard")
        before = _backends(database_url, name)
        listening.subscribe(late.subscriber)
        wait_until(lambda: late.ups == 1, "the later one is heard")
        (channel,) = late.subscriber.channels
        _notify(database_url, channel, "late")
        wait_until(lambda: late.notices == [(channel, "late")], "the later one hears its notice")
        assert _backends(database_url, name) == before
        listening.unsubscribe(late.subscriber)
        _notify(database_url, channel, "gone")
        (early_channel,) = early.subscriber.channels
        _notify(database_url, early_channel, "still")
        wait_until(lambda: early.notices == [(early_channel, "still")], "the first still hears")
        assert late.notices == [(channel, "late")]
    finally:
        listening.stop()


@pytest.fixture
def own_database(postgres_server: str) -> Iterator[str]:
    """A database of the test's own: no other app's listener is counted in it."""
    with migrated_scratch_database(postgres_server, "listener") as url:
        yield url


def test_an_app_holds_one_listen_connection_for_key_changes_and_live_signals(
    own_database: str, settings: Settings, tmp_path: Path
) -> None:
    database = Database(own_database, pool_size=2)
    world = build_tenant(database, departments=1)
    app = create_app(
        settings.model_copy(
            update={
                "database_url": own_database,
                "database_listen_url": None,
                "db_pgbouncer": False,
                "data_dir": tmp_path,
                # Far off: a change arrives by its announcement, not by the periodic read.
                "live_poll_seconds": 600,
            }
        )
    )
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            wait_until(lambda: len(_backends(own_database, APPLICATION_NAME)) == 1, "listening")
            with live_socket(client, init=world.key.headers) as socket:
                socket.subscribe("1", CHANGES)
                _revoked_and_refused(client, database, world, "before")
                _a_change_arrives(client, socket, world.key.headers, "Before")
                assert len(_backends(own_database, APPLICATION_NAME)) == 1

                lost = _backends(own_database, APPLICATION_NAME)
                _terminate(own_database, lost)
                wait_until(
                    lambda: _backends(own_database, APPLICATION_NAME) not in ([], lost),
                    "the listener is back",
                )
                _revoked_and_refused(client, database, world, "after")
                _a_change_arrives(client, socket, world.key.headers, "After")
                assert len(_backends(own_database, APPLICATION_NAME)) == 1
    finally:
        database.dispose()


def _revoked_and_refused(
    client: TestClient, database: Database, world: TenantWorld, label: str
) -> None:
    """A key of the tenant, cached by the app (so only a notice can drop it), is refused once
    its revocation's notice arrives."""
    issued = admin.issue_key(database, world.tenant.id, world.department.id, label)
    headers = {"X-Api-Key": issued.api_key, "X-Department-Id": str(world.department.id)}
    cache = client.app.state.authenticator.cache  # type: ignore[attr-defined]

    def cached() -> bool:
        assert client.get(f"{API}/customers", headers=headers).status_code == 200
        return cache.get(issued.key_id) is not None

    wait_until(cached, "the key is cached (the cache trusted)")
    admin.revoke_key(database, issued.key_id)
    wait_until(lambda: cache.get(issued.key_id) is None, "the revocation's notice drops the key")
    assert client.get(f"{API}/customers", headers=headers).status_code == 401


def _a_change_arrives(
    client: TestClient, socket: LiveSocket, headers: dict[str, str], name: str
) -> None:
    """A commit of the app reaches its own subscription: announced, and heard on the LISTEN
    connection (the periodic read is far off)."""
    create_customer(client, headers, name)
    while socket.next_data("1")["changes"]["record"]["last_name"] != name:
        pass
