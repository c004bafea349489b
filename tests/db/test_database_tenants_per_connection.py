"""A pooled connection is replaced once it has worked in as many tenant schemas as allowed, so
that a backend's catalog caches stay bounded however many tenants there are."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld


def _pid_in(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(func.pg_backend_pid())).scalar_one())


def _backend_pid(database: Database, scope: Scope) -> int:
    with database.unit_of_work(scope) as uow:
        return _pid_in(uow)


def test_a_connection_is_replaced_after_its_last_allowed_tenant_and_not_before(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second, third = (make_tenant().tenant.scope for _ in range(3))
    database = Database(database_url, pool_size=1, max_overflow=0, tenants_per_connection=3)
    try:
        pid = _backend_pid(database, first)
        # The same tenants again and again count once each.
        for scope in (first, second, first, second, first):
            assert _backend_pid(database, scope) == pid
        assert _backend_pid(database, third) == pid  # the third tenant: its last unit of work

        replaced = _backend_pid(database, first)

        assert replaced != pid
        assert _backend_pid(database, second) == replaced
    finally:
        database.dispose()


def test_one_tenant_never_wears_a_connection_out(database_url: str, world: TenantWorld) -> None:
    database = Database(database_url, pool_size=1, max_overflow=0, tenants_per_connection=2)
    try:
        pids = {_backend_pid(database, world.tenant.scope) for _ in range(20)}
    finally:
        database.dispose()

    assert len(pids) == 1


def test_the_event_loops_pool_replaces_its_connections_the_same_way(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second = (make_tenant().tenant.scope for _ in range(2))

    async def pids() -> list[int]:
        database = Database(database_url, pool_size=1, max_overflow=0, tenants_per_connection=2)
        await database.open()
        seen = []
        try:
            for scope in (first, first, second, first):
                seen.append(int(await database.run(scope, _pid_in)))
        finally:
            await database.close()
        return seen

    backend = asyncio.run(pids())

    assert backend[0] == backend[1] == backend[2] != backend[3]
