"""The limiters the rate-limit tests over HTTP run against: a real Redis, and the in-process one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis_support import shared_redis_url


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["redis", "in-process"])
def limiter_url(request: pytest.FixtureRequest) -> str | None:
    """The app's DEALBASE_REDIS_URL: a real Redis, or none (the in-process limiter)."""
    if request.param == "in-process":
        return None
    url: str = request.getfixturevalue("redis_url")
    return url
