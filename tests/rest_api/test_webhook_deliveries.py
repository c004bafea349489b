"""GET /webhooks/{id}/deliveries, POST .../deliveries/{delivery_id}/redeliver and POST
/webhooks/{id}/test: a department's delivery log, redelivery and test events, over REST.

No worker runs here: the tests take a worker's steps themselves (scan, lease, record; see
tests/delivery_support.py) and read what they recorded through the API."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.platform.resources import format_timestamp
from dealbase.platform.webhooks.delivery_models import Response
from dealbase.rest_api.schemas import TIMESTAMP_PATTERN, WebhookDeliveryOut
from dealbase.tenancy.control_tables import webhook_wakeups
from tests.delivery_support import (
    add_customer,
    lease,
    new_endpoint,
    one_event_delivery,
    record,
    scan,
)
from tests.support import Credentials, TenantWorld

API = "/api/v1/integration"
WEBHOOKS = f"{API}/webhooks"
DELIVERY_FIELDS = [
    "id", "webhook_endpoint_id", "event_id", "event_type", "state", "attempt_count",
    "next_attempt_at", "created_at", "delivered_at", "attempts",
]  # fmt: skip
ATTEMPT_FIELDS = ["attempted_at", "status_code", "duration_ms", "error"]
TIMESTAMP = re.compile(TIMESTAMP_PATTERN)
# 5 s after the first failure, then doubling (platform/webhooks/retries.py), with no jitter.
FIRST_RETRY = timedelta(seconds=5)
GIVE_UP_AFTER = timedelta(days=3)


def send_test(client: TestClient, key: Credentials, endpoint_id: str) -> dict[str, Any]:
    response = client.post(f"{WEBHOOKS}/{endpoint_id}/test", headers=key.headers)
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def log(client: TestClient, key: Credentials, endpoint_id: str, **params: Any) -> dict[str, Any]:
    response = client.get(
        f"{WEBHOOKS}/{endpoint_id}/deliveries", params=params, headers=key.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def redeliver(client: TestClient, key: Credentials, endpoint_id: str, delivery_id: str) -> Any:
    return client.post(
        f"{WEBHOOKS}/{endpoint_id}/deliveries/{delivery_id}/redeliver", headers=key.headers
    )


def near_now(timestamp: str) -> bool:
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return abs(moment - datetime.now(UTC)) < timedelta(minutes=1)


def not_found_as_unknown(response: Any, *ids: str) -> dict[str, Any]:
    """A 404's problem without its request id, the ids it names written as ``<id>``: what an
    unknown id and one the caller may not see must both answer."""
    assert response.status_code == 404, response.text
    problem: dict[str, Any] = response.json()
    del problem["request_id"]
    for value in ids:
        problem["detail"] = problem["detail"].replace(value, "<id>")
    return problem


def wakeups(database: Database, world: TenantWorld) -> int:
    with database.control() as connection:
        return int(
            connection.execute(
                select(func.count())
                .select_from(webhook_wakeups)
                .where(webhook_wakeups.c.schema_name == world.tenant.schema)
            ).scalar_one()
        )


# --- the log ----------------------------------------------------------------------------------


def test_an_events_delivery_shows_every_field_with_nulls_and_its_event(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    endpoint_id = new_endpoint(client, world.key, events=["customer.created"])
    add_customer(client, world.key)
    client.post(f"{API}/deals", json={"name": "Engine"}, headers=world.key.headers)
    now = datetime.now(UTC)
    scan(database, world, now)

    page = log(client, world.key, endpoint_id)

    (event,) = [
        e
        for e in client.get(f"{API}/events", headers=world.key.headers).json()["data"]
        if e["type"] == "customer.created"
    ]
    (delivery,) = page["data"]
    assert page["next_cursor"] is None
    assert list(delivery) == DELIVERY_FIELDS == list(WebhookDeliveryOut.model_fields)
    assert uuid.UUID(delivery["id"])
    assert delivery == {
        "id": delivery["id"],
        "webhook_endpoint_id": endpoint_id,
        "event_id": event["id"],
        "event_type": "customer.created",
        "state": "pending",
        "attempt_count": 0,
        "next_attempt_at": format_timestamp(now),
        "created_at": format_timestamp(now),
        "delivered_at": None,
        "attempts": [],
    }


def test_the_log_pages_deliveries_newest_first(client: TestClient, world: TenantWorld) -> None:
    endpoint_id = new_endpoint(client, world.key)
    sent = [send_test(client, world.key, endpoint_id)["id"] for _ in range(3)]

    first = log(client, world.key, endpoint_id, limit=2)
    second = log(client, world.key, endpoint_id, limit=2, cursor=first["next_cursor"])

    assert [d["id"] for d in first["data"]] == sent[::-1][:2]
    assert [d["id"] for d in second["data"]] == sent[:1]
    assert first["next_cursor"] is not None and second["next_cursor"] is None


def test_the_log_holds_only_the_endpoints_own_deliveries(
    client: TestClient, world: TenantWorld
) -> None:
    one, other = new_endpoint(client, world.key), new_endpoint(client, world.key)
    mine = send_test(client, world.key, one)["id"]
    send_test(client, world.key, other)

    assert [d["id"] for d in log(client, world.key, one)["data"]] == [mine]


def test_attempts_are_listed_oldest_first_with_their_outcome(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    start = datetime.now(UTC)
    endpoint_id, outgoing = one_event_delivery(client, database, world, start)
    failed_at = start + timedelta(seconds=1)
    record(database, world, outgoing, Response(500, 12, "The endpoint answered 500."), failed_at)

    (pending,) = log(client, world.key, endpoint_id)["data"]
    assert (pending["state"], pending["attempt_count"]) == ("pending", 1)
    assert pending["next_attempt_at"] == format_timestamp(failed_at + FIRST_RETRY)

    (outgoing,) = lease(database, world, failed_at + FIRST_RETRY)
    timed_out_at = failed_at + FIRST_RETRY + timedelta(seconds=1)
    record(database, world, outgoing, Response(None, 10_000, "Timed out."), timed_out_at)
    (outgoing,) = lease(database, world, timed_out_at + 2 * FIRST_RETRY)
    delivered_at = timed_out_at + 2 * FIRST_RETRY + timedelta(seconds=1)
    record(database, world, outgoing, Response(204, 30), delivered_at)

    (delivery,) = log(client, world.key, endpoint_id)["data"]
    assert [list(attempt) for attempt in delivery["attempts"]] == [ATTEMPT_FIELDS] * 3
    assert delivery["attempts"] == [
        {
            "attempted_at": format_timestamp(failed_at),
            "status_code": 500,
            "duration_ms": 12,
            "error": "The endpoint answered 500.",
        },
        {
            "attempted_at": format_timestamp(timed_out_at),
            "status_code": None,
            "duration_ms": 10_000,
            "error": "Timed out.",
        },
        {
            "attempted_at": format_timestamp(delivered_at),
            "status_code": 204,
            "duration_ms": 30,
            "error": None,
        },
    ]
    assert (delivery["state"], delivery["attempt_count"]) == ("delivered", 3)
    assert delivery["delivered_at"] == format_timestamp(delivered_at)
    assert delivery["next_attempt_at"] is None


# --- redeliver --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "after", "settled"),
    [
        # A 500 whose retry would come after the three days: the delivery gives up.
        (Response(500, 12, "The endpoint answered 500."), GIVE_UP_AFTER, "failed"),
        (Response(204, 30), timedelta(seconds=1), "delivered"),
    ],
)
def test_redeliver_makes_a_settled_delivery_pending_and_due_now(
    client: TestClient,
    world: TenantWorld,
    database: Database,
    answer: Response,
    after: timedelta,
    settled: str,
) -> None:
    start = datetime.now(UTC)
    endpoint_id, outgoing = one_event_delivery(client, database, world, start)
    record(database, world, outgoing, answer, start + after)
    (before,) = log(client, world.key, endpoint_id)["data"]
    assert before["state"] == settled and before["next_attempt_at"] is None

    response = redeliver(client, world.key, endpoint_id, before["id"])

    assert response.status_code == 202, response.text
    redelivered = response.json()
    assert list(redelivered) == DELIVERY_FIELDS
    assert redelivered["state"] == "pending" and redelivered["delivered_at"] is None
    assert near_now(redelivered["next_attempt_at"])
    # The same delivery, its attempts kept; a new run of attempts begins, its backoff anew.
    assert {k: redelivered[k] for k in ("id", "event_id", "attempts")} == {
        k: before[k] for k in ("id", "event_id", "attempts")
    }
    assert before["attempt_count"] == 1 and redelivered["attempt_count"] == 0
    assert log(client, world.key, endpoint_id)["data"] == [redelivered]
    # Due now: a worker leases it at once, to send the same message again (once the endpoint
    # is enabled: a delivery that gave up after failing throughout disabled it).
    enabled = client.patch(
        f"{WEBHOOKS}/{endpoint_id}", json={"enabled": True}, headers=world.key.headers
    )
    assert enabled.status_code == 200, enabled.text
    (again,) = lease(database, world, datetime.now(UTC))
    assert (again.delivery_id, again.message_id) == (outgoing.delivery_id, outgoing.message_id)


def test_a_redelivery_retried_with_its_idempotency_key_is_replayed(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    start = datetime.now(UTC)
    endpoint_id, outgoing = one_event_delivery(client, database, world, start)
    record(database, world, outgoing, Response(204, 30), start)
    path = f"{WEBHOOKS}/{endpoint_id}/deliveries/{outgoing.delivery_id}/redeliver"
    headers = {**world.key.headers, "Idempotency-Key": "redeliver-1"}

    first = client.post(path, headers=headers)
    # Sent again, and delivered, before the client's retry arrives.
    (leased,) = lease(database, world, datetime.now(UTC))
    record(database, world, leased, Response(204, 30), datetime.now(UTC))
    again = client.post(path, headers=headers)

    assert first.status_code == again.status_code == 202
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    # The retry did not send it once more.
    assert log(client, world.key, endpoint_id)["data"][0]["state"] == "delivered"


# --- test events ------------------------------------------------------------------------------


def test_a_test_is_a_pending_webhook_test_delivery_without_an_event(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    endpoint_id = new_endpoint(client, world.key, events=["deal.created"])
    wakeups_before = wakeups(database, world)

    delivery = send_test(client, world.key, endpoint_id)

    assert list(delivery) == DELIVERY_FIELDS
    assert delivery["webhook_endpoint_id"] == endpoint_id
    assert (delivery["event_type"], delivery["event_id"]) == ("webhook.test", None)
    assert (delivery["state"], delivery["attempt_count"], delivery["attempts"]) == (
        "pending",
        0,
        [],
    )
    assert delivery["delivered_at"] is None
    assert near_now(delivery["next_attempt_at"]) and near_now(delivery["created_at"])
    assert TIMESTAMP.match(delivery["created_at"])
    assert log(client, world.key, endpoint_id)["data"] == [delivery]
    # Not an event of the department.
    assert client.get(f"{API}/events", headers=world.key.headers).json()["data"] == []
    # The worker is woken, and sends it at once, though the endpoint subscribes to other types.
    assert wakeups(database, world) > wakeups_before
    (outgoing,) = lease(database, world, datetime.now(UTC))
    body = orjson.loads(outgoing.body)
    assert outgoing.delivery_id == uuid.UUID(delivery["id"])
    assert (body["type"], body["data"]) == ("webhook.test", {"webhook_endpoint_id": endpoint_id})
    assert body["department_id"] == str(world.department.id)


def test_each_test_request_sends_another_test(client: TestClient, world: TenantWorld) -> None:
    endpoint_id = new_endpoint(client, world.key)

    first, second = (send_test(client, world.key, endpoint_id) for _ in range(2))

    assert first["id"] != second["id"]
    assert len(log(client, world.key, endpoint_id)["data"]) == 2


def test_a_test_retried_with_its_idempotency_key_sends_one_test(
    client: TestClient, world: TenantWorld
) -> None:
    endpoint_id = new_endpoint(client, world.key)
    headers = {**world.key.headers, "Idempotency-Key": "test-1"}

    first = client.post(f"{WEBHOOKS}/{endpoint_id}/test", headers=headers)
    again = client.post(f"{WEBHOOKS}/{endpoint_id}/test", headers=headers)

    assert first.status_code == again.status_code == 202
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert [d["id"] for d in log(client, world.key, endpoint_id)["data"]] == [first.json()["id"]]


def test_the_same_key_for_another_endpoints_test_is_422_reused(
    client: TestClient, world: TenantWorld
) -> None:
    one, other = new_endpoint(client, world.key), new_endpoint(client, world.key)
    headers = {**world.key.headers, "Idempotency-Key": "test-2"}
    assert client.post(f"{WEBHOOKS}/{one}/test", headers=headers).status_code == 202

    reused = client.post(f"{WEBHOOKS}/{other}/test", headers=headers)

    assert reused.status_code == 422 and reused.json()["code"] == "idempotency_key_reused"
    assert log(client, world.key, other)["data"] == []


# --- who sees what ----------------------------------------------------------------------------


def test_another_departments_or_tenants_endpoint_answers_like_an_unknown_one(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    owner = make_tenant(departments=2)
    other_tenant = make_tenant()
    endpoint_id = new_endpoint(client, owner.key)
    delivery_id = send_test(client, owner.key, endpoint_id)["id"]
    unknown = str(uuid.uuid4())

    for key in (owner.keys[1], other_tenant.key):

        def answers(endpoint: str, key: Credentials = key) -> list[Any]:
            return [
                client.get(f"{WEBHOOKS}/{endpoint}/deliveries", headers=key.headers),
                redeliver(client, key, endpoint, delivery_id),
                client.post(f"{WEBHOOKS}/{endpoint}/test", headers=key.headers),
            ]

        for foreign, unknown_one in zip(answers(endpoint_id), answers(unknown), strict=True):
            assert not_found_as_unknown(foreign, endpoint_id) == not_found_as_unknown(
                unknown_one, unknown
            )
    # Nothing was sent on the owner's behalf.
    assert [d["id"] for d in log(client, owner.key, endpoint_id)["data"]] == [delivery_id]
    assert log(client, owner.key, endpoint_id)["data"][0]["state"] == "pending"


def test_a_delivery_of_another_endpoint_or_department_answers_like_an_unknown_one(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    owner = make_tenant(departments=2)
    mine, sibling = new_endpoint(client, owner.key), new_endpoint(client, owner.key)
    foreign = new_endpoint(client, owner.keys[1])
    of_sibling = send_test(client, owner.key, sibling)["id"]
    of_other_department = send_test(client, owner.keys[1], foreign)["id"]
    unknown = str(uuid.uuid4())

    expected = not_found_as_unknown(redeliver(client, owner.key, mine, unknown), unknown)
    for delivery_id in (of_sibling, of_other_department):
        response = redeliver(client, owner.key, mine, delivery_id)
        assert not_found_as_unknown(response, delivery_id) == expected
    assert expected["code"] == "not_found"
