"""The key cache is trusted only while the process's LISTEN connection is up, and never stores
stale loads."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import pytest
import structlog
from sqlalchemy import text
from structlog.testing import LogCapture

from dealbase.db import notifications
from dealbase.db.database import Database
from dealbase.db.notifications import Notifications
from dealbase.errors import TenantSuspended, Unauthenticated
from dealbase.ops import admin
from dealbase.tenancy.callers.api_keys import KEY_CHANGES_CHANNEL, load_credentials, parse_api_key
from dealbase.tenancy.callers.authentication import Authenticator, KeyCache, KeyChangeListener
from tests.support import TenantWorld, wait_until


@pytest.fixture
def listening_cache(database: Database) -> Iterator[KeyCache]:
    cache = KeyCache()
    notifications = Notifications(database.url)
    listener = KeyChangeListener(notifications, cache)
    listener.start()
    notifications.start()
    assert cache.trusted
    yield cache
    listener.stop()
    notifications.stop()


def test_revocation_notice_drops_the_cached_key(
    database: Database, world: TenantWorld, listening_cache: KeyCache
) -> None:
    authenticator = Authenticator(database, listening_cache)
    asyncio.run(authenticator.department_scope(world.key.api_key, str(world.key.department_id)))
    assert listening_cache.get(world.key.key_id) is not None

    admin.revoke_key(database, world.key.key_id)

    wait_until(lambda: listening_cache.get(world.key.key_id) is None, "the key is dropped")


def test_untrusted_cache_stores_nothing(database: Database, world: TenantWorld) -> None:
    cache = KeyCache()  # no listener: as when the LISTEN connection is down
    authenticator = Authenticator(database, cache)

    asyncio.run(authenticator.department_scope(world.key.api_key, str(world.key.department_id)))

    assert cache.get(world.key.key_id) is None


def test_load_that_raced_an_invalidation_is_not_stored(
    database: Database, world: TenantWorld
) -> None:
    cache = KeyCache()
    cache.set_trusted(True)
    parsed = parse_api_key(world.key.api_key)
    assert parsed is not None
    generation = cache.generation()
    with database.control() as connection:
        credentials = load_credentials(connection, parsed[0])
    assert credentials is not None

    cache.invalidate(parsed[0])  # a revocation lands between the read and the store
    cache.put(credentials, generation)

    assert cache.get(parsed[0]) is None


def test_listener_that_cannot_connect_leaves_the_cache_untrusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = KeyCache()
    listening = Notifications("postgresql://nobody@127.0.0.1:1/none")
    KeyChangeListener(listening, cache).start()
    # Captured whatever level an earlier test's app configured (one logs errors only).
    capture = LogCapture()
    monkeypatch.setattr(
        notifications,
        "log",
        structlog.wrap_logger(None, processors=[capture], wrapper_class=structlog.BoundLogger),
    )
    listening.start(wait_seconds=0)
    try:
        # Its first attempt has failed (and it waits to try again).
        wait_until(
            lambda: any(entry["event"] == "listener_down" for entry in capture.entries),
            "the listener reports its failure",
        )
        assert not cache.trusted
    finally:
        listening.stop()


def _listener_pids(database: Database) -> set[int]:
    with database.control() as connection:
        return set(
            connection.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    f" AND query = 'LISTEN {KEY_CHANGES_CHANNEL}'"
                )
            ).scalars()
        )


def test_lost_listener_connection_forgets_every_cached_key(
    database: Database, world: TenantWorld, listening_cache: KeyCache
) -> None:
    """Notices sent while the connection was down are lost, so nothing cached may survive it."""
    asyncio.run(
        Authenticator(database, listening_cache).department_scope(
            world.key.api_key, str(world.key.department_id)
        )
    )
    assert listening_cache.get(world.key.key_id) is not None
    before = _listener_pids(database)
    with database.control() as connection:
        connection.execute(
            text("SELECT pg_terminate_backend(pid) FROM unnest(:pids) AS pid"),
            {"pids": list(before)},
        )

    wait_until(lambda: bool(_listener_pids(database) - before), "the listener reconnects")

    assert listening_cache.get(world.key.key_id) is None


def _cache_keys(database: Database, cache: KeyCache, *worlds: TenantWorld) -> None:
    """Every key of each tenant, authenticated once, so now cached."""
    authenticator = Authenticator(database, cache)
    for world in worlds:
        for key in world.keys:
            asyncio.run(authenticator.department_scope(key.api_key, str(key.department_id)))
            assert cache.get(key.key_id) is not None


def _until_dropped(cache: KeyCache, key_id: uuid.UUID) -> None:
    """Returns once the notice that drops the key has been applied (and any other it carried)."""
    wait_until(lambda: cache.get(key_id) is None, "the key is dropped")


def test_a_tenant_notice_drops_every_key_of_that_tenant_and_no_other(
    database: Database, make_tenant: Callable[..., TenantWorld], listening_cache: KeyCache
) -> None:
    suspended, other = make_tenant(departments=2), make_tenant()
    _cache_keys(database, listening_cache, suspended, other)
    second = suspended.keys[1]

    admin.suspend_tenant(database, suspended.tenant.id, None)
    _until_dropped(listening_cache, suspended.key.key_id)

    assert listening_cache.get(suspended.key.key_id) is None
    assert listening_cache.get(second.key_id) is None
    assert listening_cache.get(other.key.key_id) is not None


def test_a_notice_that_names_no_key_or_tenant_drops_every_key(
    database: Database, make_tenant: Callable[..., TenantWorld], listening_cache: KeyCache
) -> None:
    first, second = make_tenant(), make_tenant()
    _cache_keys(database, listening_cache, first, second)

    with database.control() as connection:
        connection.execute(
            text("SELECT pg_notify(:channel, 'tenant:not-a-uuid')"),
            {"channel": KEY_CHANGES_CHANNEL},
        )
    _until_dropped(listening_cache, first.key.key_id)

    assert listening_cache.get(first.key.key_id) is None
    assert listening_cache.get(second.key.key_id) is None


def test_a_cached_key_accepts_a_secret_rotated_before_its_notice_arrives(
    database: Database, world: TenantWorld
) -> None:
    """A client that rotates its key and uses the new secret at once may reach a process whose
    listener has not had the rotation's notice yet: the cached key refuses the new secret, and
    the database, read again, accepts it. Here no notice ever arrives."""
    cache = KeyCache()
    cache.set_trusted(True)
    authenticator = Authenticator(database, cache)
    department = str(world.key.department_id)
    asyncio.run(authenticator.department_scope(world.key.api_key, department))
    assert cache.get(world.key.key_id) is not None

    rotated = admin.rotate_key(database, world.key.key_id, grace_seconds=0)

    scope = asyncio.run(authenticator.department_scope(rotated.api_key, department))
    assert scope.tenant_id == world.tenant.id
    with pytest.raises(Unauthenticated):
        asyncio.run(authenticator.department_scope(world.key.api_key, department))


def test_a_cached_key_of_a_tenant_resumed_before_the_notice_arrives_is_accepted(
    database: Database, world: TenantWorld
) -> None:
    cache = KeyCache()
    cache.set_trusted(True)
    authenticator = Authenticator(database, cache)
    department = str(world.key.department_id)
    admin.suspend_tenant(database, world.tenant.id, reason=None)
    with pytest.raises(TenantSuspended):
        asyncio.run(authenticator.department_scope(world.key.api_key, department))
    assert cache.get(world.key.key_id) is not None

    admin.resume_tenant(database, world.tenant.id)

    scope = asyncio.run(authenticator.department_scope(world.key.api_key, department))
    assert scope.tenant_id == world.tenant.id
