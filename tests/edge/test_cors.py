"""CORS is a setting, off by default: with ``DEALBASE_CORS_ORIGINS`` a page of a listed origin
may call the API from a browser (its preflight answered before any key is asked for, the
response headers it needs exposed); any other origin, and every origin when the setting is
empty, gets no CORS header at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from dealbase.app import create_app
from dealbase.config import Settings
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"
DASHBOARD = "https://dashboard.example.com"


def _client(settings: Settings, origins: str) -> Iterator[TestClient]:
    app = create_app(settings.model_copy(update={"cors_origins": origins}))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def allowing(settings: Settings) -> Iterator[TestClient]:
    yield from _client(settings, f"{DASHBOARD}, http://localhost:3000")


def _preflight(client: TestClient, origin: str) -> dict[str, str]:
    response = client.options(
        CUSTOMERS,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-api-key, x-department-id, content-type",
        },
    )
    return {"status": str(response.status_code), **response.headers}


def test_a_listed_origin_is_answered_its_preflight_without_a_key(allowing: TestClient) -> None:
    answered = _preflight(allowing, DASHBOARD)

    assert answered["status"] == "200"
    assert answered["access-control-allow-origin"] == DASHBOARD
    allowed = answered["access-control-allow-headers"].lower()
    assert {"x-api-key", "x-department-id", "content-type", "if-match"} <= {
        name.strip() for name in allowed.split(",")
    }
    assert "POST" in answered["access-control-allow-methods"]


def test_a_listed_origin_reads_the_headers_a_client_needs(
    allowing: TestClient, world: TenantWorld
) -> None:
    response = allowing.post(
        CUSTOMERS,
        json={"last_name": "Lovelace"},
        headers={**world.key.headers, "Origin": DASHBOARD},
    )

    assert response.status_code == 201
    assert response.headers["access-control-allow-origin"] == DASHBOARD
    exposed = {
        name.strip().lower()
        for name in response.headers["access-control-expose-headers"].split(",")
    }
    assert {"etag", "location", "ratelimit", "retry-after", "x-request-id"} <= exposed


def test_another_origin_gets_no_cors_header(allowing: TestClient, world: TenantWorld) -> None:
    refused = _preflight(allowing, "https://elsewhere.example.com")
    answered = allowing.get(
        CUSTOMERS, headers={**world.key.headers, "Origin": "https://elsewhere.example.com"}
    )

    assert refused["status"] == "400"
    assert "access-control-allow-origin" not in refused
    assert answered.status_code == 200
    assert "access-control-allow-origin" not in answered.headers


def test_cors_is_off_by_default(client: TestClient, world: TenantWorld) -> None:
    preflight = _preflight(client, DASHBOARD)
    answered = client.get(CUSTOMERS, headers={**world.key.headers, "Origin": DASHBOARD})

    assert preflight["status"] == "405"
    assert "access-control-allow-origin" not in preflight
    assert "access-control-allow-origin" not in answered.headers


@pytest.mark.parametrize("origins", ["dashboard.example.com", "https://x.example.com/path"])
def test_an_origin_that_is_not_one_is_a_bad_setting(settings: Settings, origins: str) -> None:
    with pytest.raises(ValidationError, match="is not an origin"):
        Settings.model_validate({**settings.model_dump(), "cors_origins": origins})


def test_a_refused_preflight_is_answered_as_a_problem(allowing: TestClient) -> None:
    response = allowing.options(
        CUSTOMERS,
        headers={
            "Origin": "https://elsewhere.example.com",
            "Access-Control-Request-Method": "POST",
        },
    )

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-request-id"]
    body = response.json()
    assert body["code"] == "cors_refused"
    assert body["detail"].startswith("Disallowed CORS origin: ")
    assert "access-control-allow-origin" not in response.headers
