"""A database that is slow, locked or gone answers 503 problem+json with Retry-After within a
bounded time, never a 500 and never a hang, and leaves nothing half written."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from tests.support import TenantWorld, free_port

# The tests that bound in seconds how long an answer takes while the database is stuck or
# unreachable are serial (alone on the machine); those that only wait for a lock timeout to end
# a statement (the holder lets go only after the answer) run with the others.
API = "/api/v1/integration"


def _client(settings: Settings, **changes: object) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=changes)))


@contextmanager
def _row_locked(database_url: str, world: TenantWorld, customer_id: str) -> Iterator[None]:
    """Another transaction holds the customer's row lock for as long as the block runs."""
    with psycopg.connect(database_url) as holder:
        holder.execute(
            f'SELECT 1 FROM "{world.tenant.schema}".customers WHERE id = %s FOR UPDATE',
            [uuid.UUID(customer_id)],
        )
        yield


def _assert_retryable(response: object, code: str) -> None:
    assert response.status_code == 503, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == "application/problem+json"  # type: ignore[attr-defined]
    assert int(response.headers["retry-after"]) > 0  # type: ignore[attr-defined]
    assert response.json()["code"] == code  # type: ignore[attr-defined]


@pytest.mark.serial
@pytest.mark.parametrize(
    "limits",
    [
        pytest.param({"db_lock_timeout_ms": 200}, id="lock timeout"),
        pytest.param(
            {"db_lock_timeout_ms": 0, "db_statement_timeout_ms": 300}, id="statement timeout"
        ),
    ],
)
def test_a_write_stuck_behind_a_lock_answers_503_in_time_and_writes_nothing(
    settings: Settings, world: TenantWorld, database_url: str, limits: dict[str, int]
) -> None:
    headers = world.key.headers
    with _client(settings, **limits) as client:
        created = client.post(f"{API}/customers", json={"last_name": "Locked"}, headers=headers)
        customer_id = created.json()["id"]
        with _row_locked(database_url, world, customer_id):
            started = time.monotonic()
            response = client.patch(
                f"{API}/customers/{customer_id}", json={"first_name": "Late"}, headers=headers
            )
            elapsed = time.monotonic() - started
        _assert_retryable(response, "database_timeout")
        assert elapsed < 3
        after = client.get(f"{API}/customers/{customer_id}", headers=headers)
        assert after.json()["first_name"] is None
        assert after.headers["etag"] == created.headers["etag"]
        # The pooled connection the timeout hit serves the next request.
        retried = client.patch(
            f"{API}/customers/{customer_id}", json={"first_name": "Late"}, headers=headers
        )
        assert retried.status_code == 200, retried.text


def test_a_graphql_mutation_stuck_behind_a_lock_is_a_retryable_database_timeout(
    settings: Settings, world: TenantWorld, database_url: str
) -> None:
    headers = world.key.headers
    with _client(settings, db_lock_timeout_ms=200) as client:
        created = client.post(f"{API}/customers", json={"last_name": "Locked"}, headers=headers)
        customer_id = created.json()["id"]
        with _row_locked(database_url, world, customer_id):
            response = client.post(
                "/graphql",
                json={
                    "query": "mutation($id: UUID!) {"
                    ' updateCustomer(id: $id, changes: {firstName: "Late"}) { id } }',
                    "variables": {"id": customer_id},
                },
                headers=headers,
            )
    assert response.status_code == 200
    [error] = response.json()["errors"]
    assert error["extensions"] == {"code": "database_timeout", "retry_after_seconds": 2}


@pytest.mark.serial
def test_an_unreachable_database_answers_503_within_the_acquire_timeout(
    settings: Settings, world: TenantWorld, database_url: str
) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    # The key listener keeps its own connection: it listens on the live server here.
    with _client(
        settings, database_url=down, database_listen_url=database_url, db_acquire_timeout_ms=500
    ) as client:
        started = time.monotonic()
        response = client.post(
            f"{API}/customers", json={"last_name": "Nowhere"}, headers=world.key.headers
        )
        elapsed = time.monotonic() - started
    _assert_retryable(response, "database_unavailable")
    assert elapsed < 5


def test_a_graphql_read_stuck_behind_a_lock_is_a_retryable_database_timeout(
    settings: Settings, world: TenantWorld, database_url: str
) -> None:
    headers = world.key.headers
    query = "{ customers(first: 2) { edges { node { id } } } }"
    with _client(settings, db_lock_timeout_ms=200) as client:
        client.post(f"{API}/customers", json={"last_name": "Locked"}, headers=headers)
        with psycopg.connect(database_url) as holder:
            holder.execute(f'LOCK TABLE "{world.tenant.schema}".customers IN ACCESS EXCLUSIVE MODE')
            stuck = client.post("/graphql", json={"query": query}, headers=headers)
        answered = client.post("/graphql", json={"query": query}, headers=headers)

    assert stuck.status_code == 200
    [error] = stuck.json()["errors"]
    assert error["extensions"] == {"code": "database_timeout", "retry_after_seconds": 2}
    assert len(answered.json()["data"]["customers"]["edges"]) == 1
