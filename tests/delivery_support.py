"""A webhook worker's steps, taken by a test: each one unit of work for the tenant, with no
jitter (waits are exact) and nothing sent over the network. The API tests use them to put
deliveries and attempts into the log without running a worker."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dealbase.db.database import Database
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks.delivery_models import Outgoing, Response, Sent
from tests.support import TenantWorld

LEASE = timedelta(seconds=30)


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
