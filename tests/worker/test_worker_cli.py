"""``dealbase worker`` as operators run it: a process of its own that delivers, serves its
metrics, stops cleanly on SIGTERM, and when killed outright loses no event."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import httpx
from sqlalchemy import func, select, text

from dealbase.db.database import Database
from dealbase.tenancy.control_tables import webhook_wakeups
from dealbase.worker.limits import WorkerLimits
from tests.support import DEALBASE, SERVER_START_TIMEOUT_S, TenantWorld, free_port
from tests.worker.conftest import (
    Receiver,
    Scene,
    add_customer,
    add_endpoint,
)


def start_worker(
    database_url: str, directory: Path, **settings: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """``dealbase worker`` on the database, allowed to send to the loopback, with none of the
    caller's DEALBASE_ settings but these (and no spare schemas unless asked: their DDL is
    not what these tests are about); its output in ``directory/worker.log``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("DEALBASE_")}
    env |= {
        "DEALBASE_DATABASE_URL": database_url,
        "DEALBASE_WEBHOOKS_ALLOW_PRIVATE": "true",
        "DEALBASE_DATA_DIR": str(directory),
        "DEALBASE_SPARE_TENANT_SCHEMAS": "0",
        **settings,
    }
    log = directory / "worker.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(DEALBASE), "worker"], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    return process, log


def _spares(database: Database) -> int:
    with database.control() as connection:
        return int(
            connection.execute(text("SELECT count(*) FROM control.spare_schemas")).scalar_one()
        )


def test_the_worker_process_delivers_makes_spares_serves_metrics_and_stops_on_sigterm(
    worker_database_url: str,
    worker_database: Database,
    tenant: TenantWorld,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    add_endpoint(worker_database, tenant, receiver.url)
    metrics_port = free_port()
    process, log = start_worker(
        worker_database_url,
        tmp_path,
        DEALBASE_METRICS_PORT=str(metrics_port),
        DEALBASE_HOST="127.0.0.1",
        DEALBASE_SPARE_TENANT_SCHEMAS="2",
    )
    try:
        add_customer(worker_database, tenant, "Lovelace")
        # A failure bound: the process starts (imports) on a machine the other tests load.
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not receiver.requests or _spares(worker_database) < 2:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"nothing delivered: {log.read_text()}"
            time.sleep(0.05)
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert 'dealbase_webhook_attempts_total{outcome="delivered"} 1.0' in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(timeout=15)

    assert exit_code == 0, log.read_text()
    assert receiver.types() == ["customer.created"]
    assert _spares(worker_database) == 2


def _held_by_the_dead_worker(database: Database, world: TenantWorld) -> tuple[datetime, datetime]:
    """Until when a worker that died mid-delivery holds the tenant's wakeup (its claim) and
    its one delivery (its lease)."""
    schema = world.tenant.schema
    with database.control() as connection:
        claimed_until = connection.execute(
            select(func.max(webhook_wakeups.c.due_at)).where(
                webhook_wakeups.c.schema_name == schema,
                webhook_wakeups.c.claimed_by.is_not(None),
            )
        ).scalar_one()
        leased_until = connection.execute(
            text(f'SELECT leased_until FROM "{schema}".webhook_deliveries')
        ).scalar_one()
    assert isinstance(claimed_until, datetime) and isinstance(leased_until, datetime)
    return claimed_until, leased_until


def test_a_worker_process_killed_mid_delivery_leaves_the_event_to_another_worker(
    worker_database_url: str, scene: Scene, tmp_path: Path
) -> None:
    endpoint = scene.add_endpoint()
    answer = scene.receiver.hold()  # the first request is answered only after the kill
    doomed, log = start_worker(worker_database_url, tmp_path)
    try:
        scene.add_customer("Lovelace")
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while scene.receiver.arrived == 0:
            assert doomed.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"nothing sent: {log.read_text()}"
            time.sleep(0.02)
    finally:
        doomed.kill()
        doomed.wait(timeout=10)
        answer.set()
    claimed_until, leased_until = _held_by_the_dead_worker(scene.database, scene.tenant)

    # Until the dead worker's claim and lease lapse, the event is no one else's: the other
    # workers' clock stands at the moment it claimed the tenant (its clock is the real one),
    # however long ago that was...
    scene.clock.freeze(at=claimed_until - WorkerLimits().claim_lease)
    scene.deliver()
    assert scene.receiver.arrived == 1
    # ...and once both have lapsed it is delivered by another.
    scene.clock.advance(max(claimed_until, leased_until) - scene.clock())
    scene.deliver()

    (delivery,) = scene.log(endpoint.id)
    assert delivery.state == "delivered"
    assert scene.receiver.arrived == 2 and len(set(scene.receiver.ids())) == 1
