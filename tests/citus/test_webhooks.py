"""Webhook delivery on a Citus cluster by ``dealbase worker``: the events of a distributed
schema reach the endpoint in commit order, each once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fastapi.testclient import TestClient

from tests.citus.conftest import add_ordered_endpoint, worker_on_cluster
from tests.support import SERVER_START_TIMEOUT_S, TenantWorld
from tests.worker.conftest import Receiver

API = "/api/v1/integration"


def test_the_worker_delivers_a_distributed_schemas_events_in_commit_order(
    citus_url: str,
    cluster_client: TestClient,
    cluster_world: TenantWorld,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    headers = cluster_world.key.headers
    add_ordered_endpoint(
        cluster_client, cluster_world, receiver.url, ["customer.created", "customer.updated"]
    )
    with worker_on_cluster(citus_url, tmp_path) as worker:
        made = [
            cluster_client.post(f"{API}/customers", json={"last_name": name}, headers=headers)
            for name in ("Lovelace", "Hopper", "Turing")
        ]
        assert [response.status_code for response in made] == [201, 201, 201]
        patched = cluster_client.patch(
            f"{API}/customers/{made[0].json()['id']}", json={"city": "Paris"}, headers=headers
        )
        assert patched.status_code == 200, patched.text
        # A failure bound: the process starts (imports) on a machine the other tests load.
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        worker.wait_until_delivered(cluster_world.tenant.schema, 4, deadline)

    events = [json.loads(request.body) for request in receiver.requests]
    assert [(event["type"], event["data"]["last_name"]) for event in events] == [
        ("customer.created", "Lovelace"),
        ("customer.created", "Hopper"),
        ("customer.created", "Turing"),
        ("customer.updated", "Lovelace"),
    ]
    assert all("webhook-signature" in request.headers for request in receiver.requests)
    assert "[error" not in worker.log.read_text(), worker.log.read_text()
