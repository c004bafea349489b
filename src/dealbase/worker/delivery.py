"""The webhook worker: claims wakeups, visits the tenants they name, and sends what is due.

Any number of workers, on any hosts, share the work through the database alone: a wakeup is
claimed by one worker at a time (``tenancy.wakeups``) and a delivery is leased by one worker at a
time (``FOR UPDATE SKIP LOCKED``, then a lease that outlives a worker that dies holding it). A
tenant with nothing to deliver has no wakeup, so it costs a worker nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from functools import partial

import structlog
from prometheus_client import Counter, Histogram

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.errors import DomainError, Unavailable
from dealbase.platform.events import service as events
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks.delivery_models import Outgoing, Sent
from dealbase.platform.webhooks.retries import Jitter, random_jitter
from dealbase.tenancy.coordination import wakeups
from dealbase.tenancy.coordination.worker_tasks import claim_task
from dealbase.tenancy.registry.tenants import Tenant, list_tenants
from dealbase.tenancy.scope import Scope
from dealbase.worker.limits import WorkerLimits
from dealbase.worker.sending import Sender

log = structlog.get_logger("dealbase.worker")

Clock = Callable[[], datetime]
# Seconds on a clock that never goes back: how long a visit has run, when the leases of the
# attempts it sent lapse, when to look for a purge again.
Monotonic = Callable[[], float]

# Attempts whose recording met a transient fault are recorded again after this pause, doubled
# each time up to the maximum, while their leases hold.
RECORD_RETRY_FIRST_PAUSE_SECONDS = 0.1
RECORD_RETRY_MAX_PAUSE_SECONDS = 1.0

ATTEMPTS = Counter(
    "dealbase_webhook_attempts",
    "Webhook delivery attempts, by outcome.",
    ["outcome"],
)
ATTEMPT_SECONDS = Histogram(
    "dealbase_webhook_attempt_seconds",
    "How long webhook delivery attempts took, answer or not.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
VISIT_FAILURES = Counter(
    "dealbase_webhook_visit_failures",
    "Visits of a tenant that failed (the database, most likely); the tenant is visited again"
    " when its claim lapses.",
)


def _purge(uow: UnitOfWork) -> int:
    return events.purge(uow) + deliveries.purge(uow)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(eq=False)
class DeliveryWorker:
    database: Database
    sender: Sender
    _: KW_ONLY
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    clock: Clock = utc_now
    jitter: Jitter = random_jitter
    monotonic: Monotonic = time.monotonic
    id: uuid.UUID = field(default_factory=uuid.uuid4, init=False)

    async def run(self, stop: asyncio.Event) -> None:
        """Delivers until ``stop`` is set, finishing the visits under way (whose leases would
        otherwise hold their deliveries back until they lapse). The purge runs beside the
        deliveries, not in their way, and stops between tenants."""
        next_purge_check = self.monotonic()
        purging: asyncio.Task[int | None] | None = None
        while not stop.is_set():
            if self.monotonic() >= next_purge_check and (purging is None or purging.done()):
                next_purge_check += self.limits.purge_check_every.total_seconds()
                purging = asyncio.create_task(self.purge_if_due(stop))
            try:
                visited = await self.run_once()
            except DomainError as failed:  # the database is down: wait, and try again
                log.warning("webhook_worker_claim_failed", error=failed.detail)
                visited = 0
            except Exception as failed:
                # A permanent error (the database's state, say): logged with its message each
                # time and tried again after the same wait, as a visit's failure is, so that the
                # worker goes on once it is mended.
                log.exception("webhook_worker_claim_failed", error=str(failed))
                visited = 0
            if not visited:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.limits.poll_interval.total_seconds())
        if purging is not None:
            await purging

    async def run_once(self) -> int:
        """Claims due wakeups and visits their tenants, ``tenants_at_once`` at a time; returns
        how many tenants it visited."""
        schemas = await asyncio.to_thread(self._claim)
        if not schemas:
            return 0
        slots = asyncio.Semaphore(self.limits.tenants_at_once)

        async def visit_in_slot(schema: str) -> None:
            async with slots:
                await self.visit(schema)

        await asyncio.gather(*(visit_in_slot(schema) for schema in schemas))
        return len(schemas)

    async def run_until_idle(self) -> None:
        """Visits until no wakeup is due (tests, and a final pass)."""
        while await self.run_once():
            pass

    async def purge_if_due(self, stop: asyncio.Event | None = None) -> int | None:
        """Purges every tenant's old events and test deliveries if no worker has for
        ``purge_every``, until ``stop`` is set; returns how many rows it deleted, None when it
        was not its turn."""
        try:
            due = await asyncio.to_thread(self._claim_purge)
        except DomainError as failed:
            log.warning("webhook_worker_purge_claim_failed", error=failed.detail)
            return None
        except Exception as failed:
            log.exception("webhook_worker_purge_claim_failed", error=str(failed))
            return None
        if not due:
            return None
        try:
            tenants = await asyncio.to_thread(self._tenants)
        except DomainError as failed:  # the next worker whose turn it is tries again
            log.warning("events_purge_failed", error=failed.detail)
            return None
        except Exception as failed:
            log.exception("events_purge_failed", error=str(failed))
            return None
        purged = 0
        for tenant in tenants:
            if stop is not None and stop.is_set():
                break
            try:
                purged += await self.database.run(tenant.scope, _purge)
            except Exception:
                log.exception("events_purge_failed", tenant_id=str(tenant.id))
        log.info("events_purged", rows=purged)
        return purged

    def _claim_purge(self) -> bool:
        with self.database.control() as connection:
            return claim_task(connection, "events_purge", self.clock(), self.limits.purge_every)

    def _tenants(self) -> list[Tenant]:
        with self.database.control() as connection:
            return list_tenants(connection)

    def _claim(self) -> list[str]:
        with self.database.control() as connection:
            return wakeups.claim(
                connection,
                self.id,
                self.clock(),
                self.limits.claim_lease,
                self.limits.tenants_at_once * 4,
            )

    async def visit(self, schema: str) -> None:
        """Sends the tenant's due deliveries, step by step, until none is due or the visit's
        time is up; then schedules the tenant's next visit, if anything is pending. A visit that
        fails leaves its claim to lapse, so the tenant is visited again."""
        scope = Scope(tenant_id=uuid.UUID(hex=schema.removeprefix("t_")), schema=schema)
        deadline = self.monotonic() + self.limits.visit_budget.total_seconds()
        sent: list[Sent] = []
        first = True
        leases_lapse = 0.0
        try:
            while True:
                out_of_time = self.monotonic() > deadline
                leased_at = self.monotonic()
                step = await self._step(scope, sent, first, out_of_time, leases_lapse)
                first = False
                if not step.leased:
                    break
                leases_lapse = leased_at + self.limits.delivery_lease.total_seconds()
                sent = await self._send_all(step.leased)
        except Exception:
            VISIT_FAILURES.inc()
            log.exception("webhook_visit_failed", schema=schema)
            return
        await asyncio.to_thread(self._end_visit, schema, step.next_due)

    async def _step(
        self, scope: Scope, sent: list[Sent], scan: bool, out_of_time: bool, leases_lapse: float
    ) -> deliveries.Step:
        """Records the attempts ``sent`` and leases the next deliveries. A transient fault with
        attempts to record is tried again until their leases lapse (``leases_lapse``, on
        ``monotonic``): given up, the attempts would be forgotten and their deliveries sent
        again by the next visit, as happened while a tenant moved between Citus nodes."""
        pause = RECORD_RETRY_FIRST_PAUSE_SECONDS
        while True:
            try:
                return await self.database.run(
                    scope,
                    partial(
                        deliveries.step,
                        now=self.clock(),
                        sent=sent,
                        jitter=self.jitter,
                        lease_for=self.limits.delivery_lease,
                        limit=0 if out_of_time else self.limits.deliveries_per_step,
                        scan=scan,
                    ),
                )
            except Unavailable as fault:
                if not sent or self.monotonic() + pause >= leases_lapse:
                    raise
                log.warning(
                    "webhook_attempts_not_recorded_yet",
                    schema=scope.schema,
                    attempts=len(sent),
                    error=str(fault),
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, RECORD_RETRY_MAX_PAUSE_SECONDS)

    def _end_visit(self, schema: str, next_due: datetime | None) -> None:
        with self.database.control() as connection:
            wakeups.end_visit(connection, self.id, schema, next_due)

    async def _send_all(self, leased: Sequence[Outgoing]) -> list[Sent]:
        async def send(delivery: Outgoing) -> Sent:
            attempted_at = self.clock()
            response = await self.sender.send(delivery, attempted_at)
            outcome = (
                "delivered"
                if response.succeeded
                else "no_answer"
                if response.status_code is None
                else "refused"
            )
            ATTEMPTS.labels(outcome).inc()
            ATTEMPT_SECONDS.observe(response.duration_ms / 1000)
            return Sent(delivery, response, attempted_at)

        return list(await asyncio.gather(*(send(delivery) for delivery in leased)))
