"""Fixtures of the REST tests: the limiters the rate-limit tests run against (a real Redis, and
the in-process one), each synced record in turn, employees, and a tenant a module's tests share."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.redis_support import shared_redis_url
from tests.rest_api.rate_limit_support import limiter
from tests.rest_api.records_support import RECORDS, SyncedApi
from tests.support import TenantWorld, build_tenant

__all__ = ["limiter"]  # the fixture, for the tests of this folder


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=sorted(RECORDS))
def record(request: pytest.FixtureRequest) -> SyncedApi:
    """Each synced record in turn (customers, deals, activities)."""
    return RECORDS[request.param]


@pytest.fixture
def employee_of(database: Database) -> Callable[[TenantWorld, int], uuid.UUID]:
    """``employee_of(world, department)``: a new employee, Eve, of ``world``'s department at
    that index."""

    def make_employee(world: TenantWorld, department: int = 0) -> uuid.UUID:
        return admin.create_employee(
            database, world.tenant.id, world.departments[department].id, "Eve", None
        ).id

    return make_employee


@pytest.fixture(scope="module")
def shared(database: Database) -> TenantWorld:
    """One tenant for a module's tests that write nothing another of them reads (refused
    requests; activities of a customer of their own)."""
    return build_tenant(database)
