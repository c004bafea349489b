"""A webhook worker's steps, taken by a test: each one unit of work for the tenant, with no
jitter (waits are exact) and nothing sent over the network. The API tests use them to put
deliveries and attempts into the log without running a worker, beside an endpoint and an event
made through REST."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks.delivery_models import Outgoing, Response, Sent
from tests.support import Credentials, TenantWorld

LEASE = timedelta(seconds=30)
API = "/api/v1/integration"
WEBHOOKS = f"{API}/webhooks"
PUBLIC_URL = "https://8.8.8.8/hooks/dealbase"


def _step(database: Database, world: TenantWorld, now: datetime, **options: Any) -> deliveries.Step:
    options = {"sent": [], "limit": 0, "scan": False, **options}
    with database.unit_of_work(world.tenant.scope) as uow:
        return deliveries.step(uow, now=now, jitter=lambda: 1.0, lease_for=LEASE, **options)


def scan(database: Database, world: TenantWorld, now: datetime) -> None:
    """Makes the deliveries of the events the tenant's endpoints have not seen, due ``now``."""
    _step(database, world, now, scan=True)


def lease(database: Database, world: TenantWorld, now: datetime, limit: int = 10) -> list[Outgoing]:
    """Up to ``limit`` deliveries due at ``now``, leased as a worker leases them to send."""
    return _step(database, world, now, limit=limit).leased


def record(
    database: Database, world: TenantWorld, outgoing: Outgoing, response: Response, at: datetime
) -> None:
    """Records that sending ``outgoing`` at ``at`` got ``response``."""
    record_all(database, world, [outgoing], response, at)


def record_all(
    database: Database,
    world: TenantWorld,
    leased: list[Outgoing],
    response: Response,
    at: datetime,
) -> None:
    _step(database, world, at, sent=[Sent(outgoing, response, at) for outgoing in leased])


def new_endpoint(client: TestClient, key: Credentials, **body: Any) -> str:
    """The id of a new endpoint of the key's department, for every event unless ``body`` says."""
    response = client.post(
        WEBHOOKS, json={"url": PUBLIC_URL, "events": ["*"], **body}, headers=key.headers
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def add_customer(client: TestClient, key: Credentials) -> None:
    """A customer of the key's department: an event for its endpoints."""
    response = client.post(f"{API}/customers", json={"last_name": "Lovelace"}, headers=key.headers)
    assert response.status_code == 201, response.text


def one_event_delivery(
    client: TestClient, database: Database, world: TenantWorld, now: datetime
) -> tuple[str, Outgoing]:
    """An endpoint with the delivery of one event, leased at ``now``."""
    endpoint_id = new_endpoint(client, world.key)
    add_customer(client, world.key)
    scan(database, world, now)
    (outgoing,) = lease(database, world, now)
    return endpoint_id, outgoing
