"""``dealbase worker`` as operators run it: a process of its own that delivers, serves its
metrics, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from dealbase.tenancy.database import Database
from tests.support import DEALBASE, TenantWorld, free_port
from tests.worker.conftest import Receiver, add_endpoint
from tests.worker.test_delivery import add_customer


def test_the_worker_process_delivers_serves_metrics_and_stops_on_sigterm(
    worker_database_url: str,
    worker_database: Database,
    tenant: TenantWorld,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    add_endpoint(worker_database, tenant, receiver.url)
    metrics_port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("DEALBASE_")}
    env |= {
        "DEALBASE_DATABASE_URL": worker_database_url,
        "DEALBASE_WEBHOOKS_ALLOW_PRIVATE": "true",
        "DEALBASE_METRICS_PORT": str(metrics_port),
        "DEALBASE_HOST": "127.0.0.1",
        "DEALBASE_DATA_DIR": str(tmp_path),
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(DEALBASE), "worker"], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        add_customer(worker_database, tenant, "Lovelace")
        deadline = time.monotonic() + 20
        while not receiver.requests:
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
