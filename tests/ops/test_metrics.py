"""GET /metrics in Prometheus's format: requests by route template, method and status with their
latency, the pool's connections, rate-limit refusals, key-cache hits and misses, and GraphQL
operations by name and errors by code. (A served process's sum over workers is in
test_serve.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.ops.metrics import DURATION_BUCKETS, MAX_OPERATION_NAMES, Metrics
from tests.support import TenantWorld

API = "/api/v1/integration"


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(client: TestClient, name: str, **labels: str) -> float:
    return samples(client).get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """An app of its own: its counters start at zero."""
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_requests_are_counted_by_route_template_method_and_status(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    created = client.post(f"{API}/customers", json={"last_name": "Counted"}, headers=headers)
    client.get(f"{API}/customers/{created.json()['id']}", headers=headers)
    client.get(f"{API}/customers/{created.json()['id']}", headers=headers)
    client.get("/no/such/path")

    found = samples(client)
    route = f"{API}/customers/{{customer_id}}"
    assert (
        found[
            (
                "dealbase_http_requests_total",
                frozenset({"route": route, "method": "GET", "status": "200"}.items()),
            )
        ]
        == 2
    )
    assert (
        found[
            (
                "dealbase_http_requests_total",
                frozenset({"route": f"{API}/customers", "method": "POST", "status": "201"}.items()),
            )
        ]
        == 1
    )
    assert (
        found[
            (
                "dealbase_http_requests_total",
                frozenset({"route": "unmatched", "method": "GET", "status": "404"}.items()),
            )
        ]
        == 1
    )
    assert (
        found[
            (
                "dealbase_http_request_duration_seconds_count",
                frozenset({"route": route, "method": "GET"}.items()),
            )
        ]
        == 2
    )


def test_key_cache_hits_and_misses_are_counted(client: TestClient, world: TenantWorld) -> None:
    for _ in range(3):
        client.get(f"{API}/customers", headers=world.key.headers)
    assert value(client, "dealbase_key_cache_lookups_total", result="miss") == 1
    assert value(client, "dealbase_key_cache_lookups_total", result="hit") == 2


def test_rate_limit_refusals_are_counted(settings: Settings, world: TenantWorld) -> None:
    limited = settings.model_copy(update={"rate_limit_key": "0.01/s", "rate_limit_key_burst": 1})
    with TestClient(create_app(limited)) as client:
        statuses = [
            client.get(f"{API}/customers", headers=world.key.headers).status_code for _ in range(3)
        ]
        assert statuses == [200, 429, 429]
        assert value(client, "dealbase_rate_limit_refusals_total") == 2


def test_graphql_operations_are_counted_by_name_and_errors_by_code(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    client.post("/graphql", json={"query": "query Board { departments { id } }"}, headers=headers)
    client.post("/graphql", json={"query": "{ departments { id } }"}, headers=headers)
    client.post(
        "/graphql",
        json={
            "query": "query Missing($id: UUID!) { customer(id: $id) { id } }",
            "variables": {"id": "00000000-0000-7000-8000-000000000000"},
        },
        headers=headers,
    )

    assert value(client, "dealbase_graphql_operations_total", operation="Board", type="query") == 1
    assert (
        value(client, "dealbase_graphql_operations_total", operation="anonymous", type="query") == 1
    )
    assert value(client, "dealbase_graphql_errors_total", code="not_found") == 1


def test_client_chosen_operation_names_cannot_grow_the_series_without_end(
    client: TestClient, world: TenantWorld
) -> None:
    for index in range(MAX_OPERATION_NAMES + 5):
        client.post(
            "/graphql",
            json={"query": f"query Name{index} {{ departments {{ id }} }}"},
            headers=world.key.headers,
        )
    named = [
        labels
        for (name, labels), _ in samples(client).items()
        if name == "dealbase_graphql_operations_total"
    ]
    assert len(named) == MAX_OPERATION_NAMES + 1
    assert value(client, "dealbase_graphql_operations_total", operation="other", type="query") == 5


def test_the_pool_s_connections_are_reported(client: TestClient, world: TenantWorld) -> None:
    client.get(f"{API}/customers", headers=world.key.headers)
    found = samples(client)
    assert ("dealbase_db_pool_connections", frozenset({"state": "in_use"}.items())) in found
    assert ("dealbase_db_pool_connections", frozenset({"state": "idle"}.items())) in found
    assert ("dealbase_db_pool_waiting_requests", frozenset()) in found


def test_units_of_work_are_counted_by_whether_their_connection_knew_their_tenant(
    client: TestClient, settings: Settings, world: TenantWorld
) -> None:
    for _ in range(3):
        assert client.get(f"{API}/customers", headers=world.key.headers).status_code == 200

    cold = value(client, "dealbase_db_units_of_work_total", connection="cold")
    warm = value(client, "dealbase_db_units_of_work_total", connection="warm")
    if settings.db_pgbouncer:
        # pgbouncer, not the pool, picks the backend of each transaction: nothing to count.
        assert (cold, warm) == (0, 0)
    else:
        # The first request's connection is new to the tenant; the pool gives it back after.
        assert (cold, warm) == (1, 2)


def test_requests_counted_between_writes_add_up_as_one_observation_each() -> None:
    """Requests are counted in the process and written once a second: the series then hold
    what observing each request at once would have (bucket bounds included)."""
    durations = [0.0, 0.004, 0.005, 0.0051, 0.3, 2.5, 11.0, 0.005]
    metrics = Metrics()
    for seconds in durations:
        metrics.request_answered("/r", "GET", 200, seconds)
    metrics.write_counted()
    metrics.request_answered("/r", "GET", 200, 0.02)
    metrics.write_counted()
    expected = Histogram(
        "expected_seconds", "", buckets=DURATION_BUCKETS, registry=CollectorRegistry()
    )
    for seconds in [*durations, 0.02]:
        expected.observe(seconds)

    written = {
        (sample.name, sample.labels.get("le")): sample.value
        for family in metrics.registry.collect()
        if family.name == "dealbase_http_request_duration_seconds"
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    wanted = {
        (
            sample.name.replace("expected", "dealbase_http_request_duration"),
            sample.labels.get("le"),
        ): sample.value
        for family in expected.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    assert written == wanted
    assert written[("dealbase_http_request_duration_seconds_count", None)] == 9
