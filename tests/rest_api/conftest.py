"""The limiters the rate-limit tests over HTTP run against: a real Redis, and the in-process one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.redis_support import shared_redis_url
from tests.rest_api.rate_limit_support import Limiter
from tests.rest_api.records_support import RECORDS, SyncedApi
from tests.support import FakeClock


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


# Redis keeps its buckets on its own clock, which a test cannot move: those tests measure real
# time, so they run in the serial group. In the process, the test moves the app's clock: nothing
# refills unless the test says so, however long the requests take.
@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.serial), "in-process"])
def limiter(request: pytest.FixtureRequest) -> Limiter:
    """The app's limiter: a real Redis, or the in-process one on a clock the test moves."""
    if request.param == "in-process":
        return Limiter(None, FakeClock())
    url: str = request.getfixturevalue("redis_url")
    return Limiter(url, time.monotonic)


@pytest.fixture(params=sorted(RECORDS))
def record(request: pytest.FixtureRequest) -> SyncedApi:
    """Each synced record in turn (customers, deals, activities)."""
    return RECORDS[request.param]
