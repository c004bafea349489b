"""The writes of a busy integration on a Citus cluster: a unit of work prepares a statement on
its connection once it has run it ``PREPARE_AFTER`` times, and from then on runs it with
parameters, a form Citus plans differently from the statement with its values written in
(some forms it cannot run prepared at all). Each write runs here past that point, on one
connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Write:
    """A write, and the status it answers every time; its path and body for the ``n``th run."""

    status: int
    method: str
    path: str  # {n}: the run
    body: Callable[[int], dict[str, Any]]


WRITES = {
    "create a customer": Write(201, "POST", "/customers", lambda n: {"last_name": f"c{n}"}),
    "upsert a customer": Write(
        201, "PUT", "/customers/by-external-id/c-{n}", lambda n: {"last_name": f"u{n}"}
    ),
    "create a deal with customers": Write(
        201,
        "POST",
        "/deals",
        lambda n: {"name": f"d{n}", "customers": [{"last_name": "A"}, {"last_name": "B"}]},
    ),
    "upsert a deal": Write(201, "PUT", "/deals/by-external-id/d-{n}", lambda n: {"name": f"d{n}"}),
    "batch deals": Write(
        200,
        "POST",
        "/deals/batch",
        lambda n: {"operations": [{"op": "create", "data": {"name": f"b{n}"}}]},
    ),
    "batch customers": Write(
        200,
        "POST",
        "/customers/batch",
        lambda n: {
            "operations": [{"op": "upsert", "external_id": f"bc-{n}", "data": {"last_name": "B"}}]
        },
    ),
    "create a webhook endpoint": Write(
        201,
        "POST",
        "/webhooks",
        lambda n: {"url": f"https://8.8.8.8/hooks/{n}", "events": ["*"]},
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_run_past_the_point_it_is_prepared_answers_every_time(
    one_connection_client: TestClient, cluster_world: TenantWorld, write: str
) -> None:
    each = WRITES[write]
    answers = [
        one_connection_client.request(
            each.method,
            API + each.path.format(n=n),
            json=each.body(n),
            headers=cluster_world.key.headers,
        )
        for n in range(RUNS)
    ]
    assert [answer.status_code for answer in answers] == [each.status] * RUNS, [
        answer.text for answer in answers if answer.status_code != each.status
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
