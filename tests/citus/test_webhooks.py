"""Webhook delivery on a Citus cluster by ``dealbase worker``: the events of a distributed
schema reach the endpoint in commit order, each once."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from fastapi.testclient import TestClient

from tests.citus.conftest import deliveries_by_state
from tests.support import SERVER_START_TIMEOUT_S, TenantWorld
from tests.worker.conftest import Receiver
from tests.worker.test_worker_cli import start_worker

API = "/api/v1/integration"


def test_the_worker_delivers_a_distributed_schemas_events_in_commit_order(
    citus_url: str,
    cluster_client: TestClient,
    cluster_world: TenantWorld,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    headers = cluster_world.key.headers
    endpoint = cluster_client.post(
        f"{API}/webhooks",
        json={
            "url": receiver.url,
            "events": ["customer.created", "customer.updated"],
            "ordered": True,
        },
        headers=headers,
    )
    assert endpoint.status_code == 201, endpoint.text
    process, log = start_worker(citus_url, tmp_path, DEALBASE_CITUS_SCHEMA_SHARDING="true")
    try:
        made = [
            cluster_client.post(f"{API}/customers", json={"last_name": name}, headers=headers)
            for name in ("Lovelace", "Hopper", "Turing")
        ]
        assert [response.status_code for response in made] == [201, 201, 201]
        patched = cluster_client.patch(
            f"{API}/customers/{made[0].json()['id']}", json={"city": "Paris"}, headers=headers
        )
        assert patched.status_code == 200, patched.text
        # Until the four are recorded as delivered: a delivery sent twice is sent again before
        # its record, so once all four are, the worker has sent everything it ever will. A
        # failure bound: the process starts (imports) on a machine the other tests load.
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        schema = cluster_world.tenant.schema
        while (states := deliveries_by_state(citus_url, schema)) != {"delivered": 4}:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"{states}: {log.read_text()}"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)

    events = [json.loads(request.body) for request in receiver.requests]
    assert [(event["type"], event["data"]["last_name"]) for event in events] == [
        ("customer.created", "Lovelace"),
        ("customer.created", "Hopper"),
        ("customer.created", "Turing"),
        ("customer.updated", "Lovelace"),
    ]
    assert all("webhook-signature" in request.headers for request in receiver.requests)
    assert "[error" not in log.read_text(), log.read_text()
