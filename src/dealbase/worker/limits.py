"""How much a worker does at once, and how long it holds what it claims.

Apart from the worker, so that the CLI can read the defaults without importing
prometheus_client, which must be imported only once ``dealbase serve`` has chosen where its
metrics live (ops.metrics_files).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dealbase.worker.sending import TIMEOUT_SECONDS


@dataclass(frozen=True, slots=True)
class WorkerLimits:
    # Tenants visited at once, and deliveries leased (and sent at once) per step of a visit.
    tenants_at_once: int = 8
    deliveries_per_step: int = 50
    # A leased delivery is another worker's to send once this has passed: more than a send
    # can take, so a live worker never loses one it is sending.
    delivery_lease: timedelta = timedelta(seconds=TIMEOUT_SECONDS * 3)
    # A visit ends (and the tenant is woken again at once) after this long, so that one busy
    # tenant does not hold a worker's slot; a claim lapses after this plus a delivery lease.
    visit_budget: timedelta = timedelta(seconds=30)
    # How often an idle worker looks for wakeups: at sparse traffic, the delay from commit to
    # delivery is half of it on average. One indexed query a poll.
    poll_interval: timedelta = timedelta(milliseconds=250)
    # How often the events older than the feed keeps are purged (by one worker of all), and how
    # often a worker asks whether that is its turn.
    purge_every: timedelta = timedelta(hours=24)
    purge_check_every: timedelta = timedelta(hours=1)

    @property
    def claim_lease(self) -> timedelta:
        return self.visit_budget + self.delivery_lease
