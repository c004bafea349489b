"""GET /healthz answers while the process runs; GET /readyz answers 200 only while PostgreSQL
(and Redis, when configured) answer, and otherwise a 503 problem naming what does not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from tests.redis_support import shared_redis_url
from tests.support import free_port


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shared_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _client(settings: Settings, **changes: object) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=changes)))


def test_healthz_answers_without_a_key_and_without_the_database(settings: Settings) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with _client(settings, database_url=down, database_listen_url=settings.database_url) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_postgresql_and_redis(settings: Settings, redis_url: str) -> None:
    with _client(settings, redis_url=redis_url) as client:
        response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checks": {"postgresql": "ok", "redis": "ok"}}


def test_readyz_without_redis_configured_checks_postgresql_only(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json()["checks"] == {"postgresql": "ok"}


def test_readyz_names_an_unreachable_redis_in_a_503_problem(settings: Settings) -> None:
    with _client(settings, redis_url=f"redis://127.0.0.1:{free_port()}/0") as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"].isdigit()
    body = response.json()
    assert body["code"] == "not_ready"
    assert body["detail"] == "Not answering: redis."
    assert body["checks"] == {"postgresql": "ok", "redis": "unavailable"}


def test_readyz_names_an_unreachable_postgresql_in_a_503_problem(
    settings: Settings, database_url: str
) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    # The key-change listener keeps its own connection: it listens on the live server here. The
    # check waits for a connection as long as the service's default allows (the tests' settings
    # wait a minute, for a busy machine): nothing else here waits on that bound.
    service_wait = Settings.model_fields["db_acquire_timeout_ms"].default
    with _client(
        settings,
        database_url=down,
        database_listen_url=database_url,
        db_acquire_timeout_ms=service_wait,
    ) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["detail"] == "Not answering: postgresql."
    assert body["checks"] == {"postgresql": "database_unavailable"}


def test_health_endpoints_are_not_in_the_integration_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/healthz" not in paths
    assert "/readyz" not in paths
