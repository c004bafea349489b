"""The events of writes on a distributed schema, whose statements differ from the single
server's (``plans``): each carries the record as the API answered it."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support import TenantWorld

API = "/api/v1/integration"


def test_a_customers_created_event_carries_the_answer_of_its_create(
    cluster_client: TestClient, cluster_world: TenantWorld
) -> None:
    headers = cluster_world.key.headers
    created = cluster_client.post(
        f"{API}/customers",
        json={"last_name": "O'Brien \\ \u00e9", "city": "Zürich", "birthday": "1990-02-03"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    deleted = cluster_client.delete(f"{API}/customers/{created.json()['id']}", headers=headers)
    assert deleted.status_code == 204, deleted.text

    events = cluster_client.get(f"{API}/events", headers=headers)
    assert events.status_code == 200, events.text
    by_type = {event["type"]: event for event in events.json()["data"]}
    assert by_type["customer.created"]["data"] == created.json()
    assert by_type["customer.deleted"]["data"]["id"] == created.json()["id"]
