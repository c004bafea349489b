"""The limiters the rate-limit tests over HTTP run against: a real Redis, and the in-process one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis_support import shared_redis_url
from tests.rest_api.rate_limit_support import limiter
from tests.rest_api.records_support import RECORDS, SyncedApi

__all__ = ["limiter"]  # the fixture, for the tests of this folder


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=sorted(RECORDS))
def record(request: pytest.FixtureRequest) -> SyncedApi:
    """Each synced record in turn (customers, deals, activities)."""
    return RECORDS[request.param]
