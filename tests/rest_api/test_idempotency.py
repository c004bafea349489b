"""Idempotency-Key on POST: replays, conflicts, reuse with another body, scope and expiry."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select, text, update

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.platform.idempotency import repository as idempotency_records
from dealbase.platform.tables import customers
from dealbase.platform.tables import idempotency_records as records_table
from tests.support import TenantWorld

API = "/api/v1/integration"


def customer_count(database: Database, world: TenantWorld) -> int:
    with database.unit_of_work(world.tenant.scope) as uow:
        return int(uow.connection.execute(select(func.count()).select_from(customers)).scalar_one())


def post(
    client: TestClient, world: TenantWorld, key: str, body: dict[str, Any], path: str = "/customers"
) -> Any:
    return client.post(
        f"{API}{path}", json=body, headers={**world.key.headers, "Idempotency-Key": key}
    )


def test_retry_with_the_same_key_and_body_replays_the_first_response(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    first = post(client, world, "order-1", {"last_name": "Lovelace"})
    again = post(client, world, "order-1", {"last_name": "Lovelace"})

    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert customer_count(database, world) == 1


def test_replay_ignores_key_order_and_white_space(client: TestClient, world: TenantWorld) -> None:
    headers = {**world.key.headers, "Idempotency-Key": "k", "Content-Type": "application/json"}
    first = client.post(
        f"{API}/customers", content=b'{"last_name":"A","city":"B"}', headers=headers
    )
    again = client.post(
        f"{API}/customers", content=b'{ "city": "B",\n "last_name": "A" }', headers=headers
    )

    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["id"] == first.json()["id"]


def test_structured_field_form_of_the_key_is_the_same_key(
    client: TestClient, world: TenantWorld
) -> None:
    first = post(client, world, "abc", {"last_name": "A"})
    again = post(client, world, '"abc"', {"last_name": "A"})

    assert again.json()["id"] == first.json()["id"]


def test_same_key_with_another_body_is_422_and_writes_nothing(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    post(client, world, "k", {"last_name": "A"})

    other_body = post(client, world, "k", {"last_name": "B"})
    other_path = post(client, world, "k", {"name": "deal"}, path="/deals")

    for response in (other_body, other_path):
        assert response.status_code == 422
        assert response.json()["code"] == "idempotency_key_reused"
    assert customer_count(database, world) == 1


def test_same_key_while_the_first_request_runs_is_409(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    # Hold the key's lock as a first request still in its transaction would.
    with database.unit_of_work(world.tenant.scope) as uow:
        assert idempotency_records.try_lock(
            uow.connection, world.tenant.schema, world.key.key_id, "busy"
        )
        response = post(client, world, "busy", {"last_name": "A"})

    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_in_use"
    assert customer_count(database, world) == 0
    assert post(client, world, "busy", {"last_name": "A"}).status_code == 201


def test_concurrent_requests_with_one_key_create_exactly_one_customer(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    answers: list[Any] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        answers.append(post(client, world, "race", {"last_name": "Racer"}))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert customer_count(database, world) == 1
    assert {response.status_code for response in answers} <= {201, 409}
    created_ids = {response.json()["id"] for response in answers if response.status_code == 201}
    assert len(created_ids) == 1


def test_keys_are_scoped_to_the_api_key_that_sent_them(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    second = admin.issue_key(database, world.tenant.id, world.department.id, "second")
    headers = {"X-Api-Key": second.api_key, "X-Department-Id": str(world.department.id)}

    first = post(client, world, "shared", {"last_name": "A"})
    other = client.post(
        f"{API}/customers",
        json={"last_name": "A"},
        headers={**headers, "Idempotency-Key": "shared"},
    )

    assert other.status_code == 201
    assert other.json()["id"] != first.json()["id"]
    assert customer_count(database, world) == 2


def test_a_failed_request_does_not_use_up_its_key(client: TestClient, world: TenantWorld) -> None:
    assert post(client, world, "fix-and-retry", {"last_name": ""}).status_code == 422

    assert post(client, world, "fix-and-retry", {"last_name": "A"}).status_code == 201


def test_a_key_older_than_24_hours_runs_the_request_again(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    first = post(client, world, "old", {"last_name": "A"})
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.execute(
            update(records_table).values(created_at=func.now() - text("interval '25 hours'"))
        )

    again = post(client, world, "old", {"last_name": "A"})

    assert again.status_code == 201
    assert "idempotent-replayed" not in again.headers
    assert again.json()["id"] != first.json()["id"]


def test_every_post_accepts_a_key(
    client: TestClient, world: TenantWorld, make_tenant: Callable[..., TenantWorld]
) -> None:
    customer = post(client, world, "c", {"last_name": "A"}).json()
    deal = post(client, world, "d", {"name": "D"}, path="/deals").json()
    bodies = {
        "/activities": {"type": "call", "customer_id": customer["id"]},
        f"/deals/{deal['id']}/customers": {"customer_id": customer["id"]},
    }
    for path, body in bodies.items():
        first = post(client, world, f"key {path}", body, path=path)
        again = post(client, world, f"key {path}", body, path=path)
        assert first.status_code in (200, 201), first.text
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.content == first.content


def test_malformed_key_is_422(client: TestClient, world: TenantWorld) -> None:
    for key in ("x" * 256, "tab\there"):
        response = post(client, world, key, {"last_name": "A"})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "Idempotency-Key"
