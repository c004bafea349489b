"""The webhook worker against a real receiver on the loopback: what it sends, signed how, when
it tries again, and what it never sends."""

from __future__ import annotations

import orjson
from standardwebhooks.webhooks import Webhook

from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import service as events
from dealbase.platform.events.models import EventFilter, event_json
from dealbase.tenancy.database import Database
from tests.support import TenantWorld
from tests.worker.conftest import Receiver, Workers, add_endpoint


def add_customer(database: Database, world: TenantWorld, last_name: str) -> None:
    with database.unit_of_work(world.tenant.scope.in_department(world.department.id)) as uow:
        customers.create(uow, CustomerFields(last_name=last_name))


def feed(database: Database, world: TenantWorld) -> list[dict[str, object]]:
    with database.unit_of_work(world.tenant.scope.in_department(world.department.id)) as uow:
        page = events.feed(uow, EventFilter(), 100, None)
    return [event_json(event) for event in page.items]


def test_an_event_arrives_signed_as_standard_webhooks_verifies_it(
    worker_database: Database, tenant: TenantWorld, receiver: Receiver, workers: Workers
) -> None:
    endpoint = add_endpoint(worker_database, tenant, receiver.url)
    add_customer(worker_database, tenant, "Lovelace")

    workers.run(workers().run_until_idle())

    (request,) = receiver.requests
    verified = Webhook(endpoint.secret).verify(request.body, request.headers)
    (event,) = feed(worker_database, tenant)
    assert verified == event
    assert orjson.loads(request.body) == event
    assert request.headers["webhook-id"] == event["id"]
    assert request.headers["content-type"] == "application/json"
