"""The webhook worker's visit of a distributed schema: every statement it sends the tenant's
schema (the scan for new events, the deliveries it makes and records) is routed whole to the
tenant's worker, but the scan, not routed yet (``plans.WORKER_NOT_ROUTED_YET``)."""

from __future__ import annotations

import asyncio

import pytest

from dealbase.db.database import Database
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.worker.delivery import DeliveryWorker
from dealbase.worker.sending import Sender
from tests.citus.plans import WORKER_NOT_ROUTED_YET, assert_routed_whole, statements_sent
from tests.support import TenantWorld
from tests.worker.conftest import ALLOW_PRIVATE, Receiver, add_endpoint, receiver

__all__ = ["receiver"]  # the fixture, for this module's tests


def test_a_visit_of_the_webhook_worker_sends_only_statements_routed_whole(
    cluster_database: Database,
    cluster_world: TenantWorld,
    receiver: Receiver,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_endpoint(cluster_database, cluster_world, receiver.url, ordered=True)
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    for name in ("Lovelace", "Hopper"):
        with cluster_database.unit_of_work(scope) as uow:
            customers.create(uow, CustomerFields(last_name=name))

    worker = DeliveryWorker(cluster_database, Sender(ALLOW_PRIVATE), jitter=lambda: 1.0)

    async def visit() -> None:
        try:
            await worker.visit(scope.schema)
        finally:
            await worker.sender.close()

    with statements_sent(monkeypatch) as sent:
        asyncio.run(visit())

    assert len(receiver.requests) == 2
    assert_routed_whole(citus_url, sent, set(WORKER_NOT_ROUTED_YET))
