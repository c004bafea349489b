"""The writes of a busy integration on a Citus cluster: a unit of work prepares a statement on
its connection once it has run it ``PREPARE_AFTER`` times, and from then on runs it with
parameters, a form Citus plans differently from the statement with its values written in
(some forms it cannot run prepared at all). Each write runs here past that point, on one
connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import PREPARE_AFTER
from tests.support import TenantWorld

API = "/api/v1/integration"
RUNS = PREPARE_AFTER + 3


@pytest.fixture
def one_connection_client(cluster_settings: Settings) -> Iterator[TestClient]:
    settings = cluster_settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


# Each write, and the status it answers every time.
WRITES: dict[str, tuple[int, Callable[[TestClient, dict[str, str], int], Any]]] = {
    "create a customer": (
        201,
        lambda c, h, n: c.post(f"{API}/customers", json={"last_name": f"c{n}"}, headers=h),
    ),
    "upsert a customer": (
        201,
        lambda c, h, n: c.put(
            f"{API}/customers/by-external-id/c-{n}", json={"last_name": f"u{n}"}, headers=h
        ),
    ),
    "create a deal with customers": (
        201,
        lambda c, h, n: c.post(
            f"{API}/deals",
            json={"name": f"d{n}", "customers": [{"last_name": "A"}, {"last_name": "B"}]},
            headers=h,
        ),
    ),
    "upsert a deal": (
        201,
        lambda c, h, n: c.put(
            f"{API}/deals/by-external-id/d-{n}", json={"name": f"d{n}"}, headers=h
        ),
    ),
    "batch deals": (
        200,
        lambda c, h, n: c.post(
            f"{API}/deals/batch",
            json={"operations": [{"op": "create", "data": {"name": f"b{n}"}}]},
            headers=h,
        ),
    ),
    "batch customers": (
        200,
        lambda c, h, n: c.post(
            f"{API}/customers/batch",
            json={
                "operations": [
                    {"op": "upsert", "external_id": f"bc-{n}", "data": {"last_name": "B"}}
                ]
            },
            headers=h,
        ),
    ),
    "create a webhook endpoint": (
        201,
        lambda c, h, n: c.post(
            f"{API}/webhooks",
            json={"url": f"https://8.8.8.8/hooks/{n}", "events": ["*"]},
            headers=h,
        ),
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_run_past_the_point_it_is_prepared_answers_every_time(
    one_connection_client: TestClient, cluster_world: TenantWorld, write: str
) -> None:
    expected, send = WRITES[write]
    answers = [send(one_connection_client, cluster_world.key.headers, n) for n in range(RUNS)]
    assert [answer.status_code for answer in answers] == [expected] * RUNS, [
        answer.text for answer in answers if answer.status_code != expected
    ]


def test_linking_customers_past_the_point_it_is_prepared_answers_every_time(
    one_connection_client: TestClient, cluster_world: TenantWorld
) -> None:
    headers = cluster_world.key.headers
    deal = one_connection_client.put(
        f"{API}/deals/by-external-id/linked", json={"name": "Linked"}, headers=headers
    ).json()
    linked = []
    for n in range(RUNS):
        customer = one_connection_client.post(
            f"{API}/customers", json={"last_name": f"l{n}"}, headers=headers
        ).json()
        link = one_connection_client.post(
            f"{API}/deals/{deal['id']}/customers",
            json={"customer_id": customer["id"]},
            headers=headers,
        )
        linked.append(link.status_code)
    assert linked == [200] * RUNS
