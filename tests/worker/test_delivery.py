"""The webhook worker against a real receiver on the loopback: what it sends, signed how, when
it tries again, and what it never sends."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from datetime import timedelta
from typing import Any

import orjson
import psycopg
import pytest
from sqlalchemy import func, text, update
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from dealbase.db.transactions import TenantConnection
from dealbase.ops import admin
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields, CustomerPatch
from dealbase.platform.tables import events as events_table
from dealbase.platform.tables import webhook_deliveries
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.platform.webhooks.models import (
    Checked,
    WebhookEndpointPatch,
)
from dealbase.tenancy.control_tables import CONTROL_SCHEMA
from dealbase.worker import delivery as worker_delivery
from dealbase.worker.limits import WorkerLimits
from tests.support import build_tenant, logs_of, writes_raise
from tests.worker.conftest import Receiver, Scene, add_customer, add_endpoint, until


def test_an_event_arrives_signed_as_standard_webhooks_verifies_it(scene: Scene) -> None:
    endpoint = scene.add_endpoint()
    scene.add_customer("Lovelace")

    scene.deliver()

    (request,) = scene.receiver.requests
    verified = Webhook(endpoint.secret).verify(request.body, request.headers)
    (event,) = scene.feed()
    assert verified == event
    assert orjson.loads(request.body) == event
    assert request.headers["webhook-id"] == event["id"]
    assert request.headers["content-type"] == "application/json"


# How far short of a retry's time the tests look for it not to be due yet: more than the
# microsecond the database keeps times to.
JUST_SHORT = timedelta(milliseconds=1)


def test_failed_attempts_are_retried_after_5_10_20_seconds_then_delivered(scene: Scene) -> None:
    endpoint = scene.add_endpoint()
    scene.add_customer("Lovelace")
    scene.receiver.answer(500, 500, 500)
    worker = scene.workers()
    # From here the workers' time is the test's alone: a retry is due when the test says so,
    # however long the machine takes between two deliveries.
    scene.clock.freeze()

    scene.deliver(worker)
    for wait in (5, 10, 20):
        scene.clock.advance(timedelta(seconds=wait) - JUST_SHORT)
        scene.deliver(worker)
        assert scene.receiver.arrived == len(scene.receiver.requests)
        before = len(scene.receiver.requests)
        assert before == 1 + (5, 10, 20).index(wait), f"a retry sooner than {wait} s"
        scene.clock.advance(JUST_SHORT)
        scene.deliver(worker)
        assert len(scene.receiver.requests) == before + 1, f"no retry {wait} s after the last"

    (delivery,) = scene.log(endpoint.id)
    assert delivery.state == "delivered" and delivery.attempt_count == 4
    assert [attempt.status_code for attempt in delivery.attempts] == [500, 500, 500, 204]
    assert delivery.attempts[0].error == "The endpoint answered 500."
    assert delivery.attempts[-1].error is None
    gaps = [
        (later.attempted_at - earlier.attempted_at).total_seconds()
        for earlier, later in itertools.pairwise(delivery.attempts)
    ]
    assert gaps == [5, 10, 20]
    assert len(set(scene.receiver.ids())) == 1


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_on_429_and_503_holds_the_next_attempt_back(scene: Scene, status: int) -> None:
    scene.add_endpoint()
    scene.add_customer("Lovelace")
    scene.receiver.answer(status, headers={"Retry-After": "120"})
    worker = scene.workers()
    scene.clock.freeze()
    scene.deliver(worker)

    scene.clock.advance(timedelta(seconds=120) - JUST_SHORT)
    scene.deliver(worker)
    assert len(scene.receiver.requests) == 1

    scene.clock.advance(JUST_SHORT)
    scene.deliver(worker)
    assert len(scene.receiver.requests) == 2


def test_410_disables_the_endpoint_and_says_why(scene: Scene) -> None:
    endpoint = scene.add_endpoint()
    scene.add_customer("Lovelace")
    scene.receiver.answer(410)
    scene.deliver()

    scene.add_customer("Hopper")
    scene.clock.advance(timedelta(hours=1))
    scene.deliver()

    assert len(scene.receiver.requests) == 1
    disabled = scene.endpoint(endpoint.id)
    assert disabled.enabled is False
    assert "410 Gone" in (disabled.disabled_reason or "")
    (delivery,) = scene.log(endpoint.id)
    assert delivery.state == "failed" and delivery.next_attempt_at is None


def test_an_endpoint_failing_for_three_days_is_disabled_and_its_delivery_gives_up(
    scene: Scene,
) -> None:
    endpoint = scene.add_endpoint()
    scene.add_customer("Lovelace")
    scene.receiver.default = 500
    worker = scene.workers()
    scene.clock.freeze()  # one attempt a retry's time, however long each delivery takes
    scene.deliver(worker)
    (delivery,) = scene.log(endpoint.id)
    while delivery.next_attempt_at is not None:  # to each retry's time, and a little past it
        scene.clock.advance(delivery.next_attempt_at - scene.clock() + timedelta(milliseconds=10))
        scene.deliver(worker)
        (delivery,) = scene.log(endpoint.id)

    assert delivery.state == "failed"
    first, last = delivery.attempts[0].attempted_at, delivery.attempts[-1].attempted_at
    assert timedelta(days=3) <= last - first <= timedelta(days=3, hours=12)
    # 5 s doubling to 12 h: 15 attempts within the first day, then one every 12 h.
    assert delivery.attempt_count == 20
    disabled = scene.endpoint(endpoint.id)
    assert disabled.enabled is False
    assert "No delivery succeeded for three days" in (disabled.disabled_reason or "")
    assert "The endpoint answered 500." in (disabled.disabled_reason or "")


def test_an_old_delivery_failing_once_gives_up_but_leaves_a_healthy_endpoint_enabled(
    scene: Scene,
) -> None:
    endpoint = scene.add_endpoint()
    with scene.unit_of_work() as uow:
        test = deliveries.send_test(uow, endpoint.id)
        uow.connection.execute(
            update(webhook_deliveries)
            .where(webhook_deliveries.c.id == test.id)
            .values(started_at=func.now() - timedelta(days=4))
        )
    scene.receiver.answer(500)
    scene.deliver()

    (delivery,) = scene.log(endpoint.id)
    assert delivery.state == "failed" and delivery.attempt_count == 1
    assert scene.endpoint(endpoint.id).enabled is True


def test_a_410_disables_the_endpoint_though_another_attempt_of_the_step_succeeded(
    scene: Scene,
) -> None:
    endpoint = scene.add_endpoint(ordered=False)
    for name in ("first", "second"):
        scene.add_customer(name)
    scene.receiver.answer(410, 204)
    scene.deliver()

    assert len(scene.receiver.requests) == 2
    assert scene.endpoint(endpoint.id).enabled is False


def test_a_success_between_failures_keeps_the_endpoint_enabled(scene: Scene) -> None:
    endpoint = scene.add_endpoint(ordered=False)
    scene.receiver.default = 500
    worker = scene.workers()
    started = scene.clock()
    scene.add_customer("Lovelace")
    scene.deliver(worker)
    while scene.clock() - started < timedelta(days=4):
        scene.clock.advance(timedelta(hours=12))
        scene.receiver.answer(204)
        scene.add_customer("Hopper")
        scene.deliver(worker)

    assert scene.endpoint(endpoint.id).enabled is True


def _three_events_the_first_answered_500(scene: Scene, *, ordered: bool) -> None:
    """An endpoint, three customers made, one delivery run in which the first event's attempt
    is answered 500; the clock frozen, so that its retry is not due until the test says so."""
    scene.add_endpoint(ordered=ordered)
    for name in ("first", "second", "third"):
        scene.add_customer(name)
    scene.receiver.answer(500)
    scene.clock.freeze()
    scene.deliver()


def test_an_ordered_endpoint_gets_the_next_event_only_after_the_previous_one(scene: Scene) -> None:
    _three_events_the_first_answered_500(scene, ordered=True)
    assert len(scene.receiver.requests) == 1

    scene.clock.advance(timedelta(seconds=6))
    scene.deliver()

    assert scene.last_names_received() == ["first", "first", "second", "third"]


def test_an_unordered_endpoint_gets_later_events_while_one_is_retried(scene: Scene) -> None:
    _three_events_the_first_answered_500(scene, ordered=False)

    assert len(scene.receiver.requests) == 3
    assert len(set(scene.receiver.ids())) == 3


def test_only_subscribed_event_types_are_delivered(scene: Scene) -> None:
    scene.add_endpoint(events=["customer.updated"])
    with scene.unit_of_work() as uow:
        customer = customers.create(uow, CustomerFields(last_name="Lovelace"))
    with scene.unit_of_work() as uow:
        customers.RECORD.update(uow, customer.id, CustomerPatch(city="London"))
    scene.deliver()

    assert scene.receiver.types() == ["customer.updated"]


def test_a_worker_killed_mid_delivery_leaves_the_event_to_another(scene: Scene) -> None:
    endpoint = scene.add_endpoint()
    scene.add_customer("Lovelace")
    answer = scene.receiver.hold()
    doomed, survivor = scene.workers(), scene.workers()
    scene.clock.freeze()  # the claim and the lease lapse when the test says so

    async def kill_mid_delivery() -> None:
        task = asyncio.create_task(doomed.run_once())
        await until(lambda: scene.receiver.arrived > 0, "the doomed worker sent the event")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        answer.set()  # answered only once no one waits for it
        # Its lease and its claim on the tenant's wakeup hold the event back until they lapse.
        await survivor.run_until_idle()
        assert scene.receiver.arrived == 1
        scene.clock.advance(doomed.limits.claim_lease + timedelta(seconds=1))
        await survivor.run_until_idle()

    scene.workers.run(kill_mid_delivery())

    (delivery,) = scene.log(endpoint.id)
    assert delivery.state == "delivered"
    assert scene.receiver.arrived == 2 and len(set(scene.receiver.ids())) == 1


def test_attempts_whose_recording_meets_a_transient_fault_are_recorded_when_it_passes(
    scene: Scene, worker_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As while a tenant moves between Citus nodes: the database refuses the attempt's record
    for a moment after the scene.receiver answered. Forgotten, the delivery would be sent again once
    its lease lapsed."""
    endpoint = scene.add_endpoint()
    scene.add_customer("Lovelace")
    answer = scene.receiver.hold()
    worker = scene.workers()

    def refusals() -> int:
        return sum(entry["event"] == "webhook_attempts_not_recorded_yet" for entry in logs)

    async def refused_while_recording() -> None:
        visit = asyncio.create_task(worker.run_once())
        await until(lambda: scene.receiver.arrived > 0, "the worker sent the event")
        with writes_raise(
            worker_database_url, scene.tenant.tenant.schema, "webhook_deliveries", "57P03", "UPDATE"
        ):
            answer.set()  # answered only now that recording it is refused
            await until(lambda: refusals() > 0, "the attempt's record was refused")
        await visit
        scene.clock.advance(worker.limits.claim_lease + timedelta(seconds=1))
        await worker.run_until_idle()

    with logs_of(monkeypatch, worker_delivery) as logs:
        scene.workers.run(refused_while_recording())

    (delivery,) = scene.log(endpoint.id)
    assert delivery.state == "delivered"
    assert scene.receiver.arrived == 1


def test_two_workers_deliver_each_event_once(scene: Scene) -> None:
    worlds = [build_tenant(scene.database) for _ in range(3)]
    for world in worlds:
        add_endpoint(scene.database, world, scene.receiver.url, ordered=False)
        add_endpoint(scene.database, world, scene.receiver.url + "/ordered")
        for index in range(20):
            add_customer(scene.database, world, f"customer {index}")
    first, second = scene.workers(), scene.workers()

    async def both() -> None:
        await asyncio.gather(first.run_until_idle(), second.run_until_idle())

    scene.workers.run(both())

    # Each event once per endpoint: 3 tenants, 2 endpoints, 20 events.
    assert len(scene.receiver.requests) == 120
    assert len(set(scene.receiver.ids())) == 60


def test_events_wait_while_the_receiver_is_down_and_arrive_in_order_when_it_is_back(
    scene: Scene,
) -> None:
    endpoint = scene.add_endpoint()
    scene.receiver.stop()
    for name in ("first", "second"):
        scene.add_customer(name)
    worker = scene.workers()
    scene.clock.freeze()  # one attempt each time the test moves the clock past a retry's time
    scene.deliver(worker)
    scene.clock.advance(timedelta(seconds=6))
    scene.deliver(worker)
    (waiting, _) = scene.log(endpoint.id)
    assert [attempt.status_code for attempt in waiting.attempts] == [None, None]
    assert "ConnectError" in (waiting.attempts[0].error or "")

    scene.receiver.start()
    scene.clock.advance(timedelta(seconds=11))
    scene.deliver(worker)

    assert scene.last_names_received() == ["first", "second"]


def test_events_of_a_rolled_back_transaction_are_never_sent(scene: Scene) -> None:
    scene.add_endpoint()

    class FailsAtCommit:
        """A statement that fails after the events', in the COMMIT's round trip."""

        def before_commit(self, connection: TenantConnection) -> None:
            connection.defer(text("SELECT 1 / 0"), {})

        def after_commit(self, connection: TenantConnection) -> None:
            pass

    def fail_after_writing() -> None:
        with scene.unit_of_work() as uow:
            customers.create(uow, CustomerFields(last_name="Rolled back"))
            uow.finisher(FailsAtCommit)

    with pytest.raises(psycopg.errors.DivisionByZero):
        fail_after_writing()
    scene.deliver()
    assert scene.receiver.requests == []

    scene.add_customer("Committed")
    scene.deliver()
    assert scene.last_names_received() == ["Committed"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_private_address_is_refused_at_delivery_unless_allowed(scene: Scene, host: str) -> None:
    port = scene.receiver.url.split(":")[2].split("/")[0]
    endpoint = scene.add_endpoint(f"https://{host}:{port}/hooks")
    scene.add_customer("Lovelace")

    scene.deliver(scene.workers(AddressPolicy(allow_private=False)))

    assert scene.receiver.arrived == 0
    (delivery,) = scene.log(endpoint.id)
    (attempt,) = delivery.attempts
    assert attempt.status_code is None
    assert "not public" in (attempt.error or "")
    assert delivery.state == "pending"


def test_an_ipv6_address_is_reached_with_its_host_bracketed(
    scene: Scene, receiver_on_ipv6: Receiver
) -> None:
    scene.add_endpoint(receiver_on_ipv6.url)
    scene.add_customer("Lovelace")
    scene.deliver()

    (request,) = receiver_on_ipv6.requests
    assert request.headers["host"] == receiver_on_ipv6.url.split("/")[2]


def test_during_a_rotation_either_secret_verifies_the_signature(scene: Scene) -> None:
    endpoint = scene.add_endpoint()
    with scene.unit_of_work() as uow:
        rotated = endpoints.rotate_secret(uow, endpoint.id)
    scene.add_customer("Lovelace")
    scene.deliver()

    (request,) = scene.receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (endpoint.secret, rotated.secret):
        Webhook(secret).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoints.new_secret()).verify(request.body, request.headers)


def test_a_disabled_endpoint_keeps_its_events_until_it_is_enabled_again(scene: Scene) -> None:
    endpoint = scene.add_endpoint(enabled=False)
    with scene.unit_of_work() as uow:
        endpoints.update(uow, endpoint.id, Checked(WebhookEndpointPatch(enabled=False)))
    scene.add_customer("Lovelace")
    scene.deliver()
    assert scene.receiver.requests == []

    with scene.unit_of_work() as uow:
        endpoints.update(uow, endpoint.id, Checked(WebhookEndpointPatch(enabled=True)))
    scene.deliver()

    assert scene.last_names_received() == ["Lovelace"]


def test_a_suspended_tenants_events_recorded_before_the_suspension_are_delivered(
    scene: Scene,
) -> None:
    scene.add_endpoint()
    scene.add_customer("Lovelace")

    admin.suspend_tenant(scene.database, scene.tenant.tenant.id, "the API refuses its keys")
    scene.deliver()

    assert scene.last_names_received() == ["Lovelace"]


def test_tenants_with_nothing_to_deliver_are_never_visited(scene: Scene) -> None:
    idle = [build_tenant(scene.database) for _ in range(5)]
    for world in idle:
        add_customer(scene.database, world, "No endpoint here")
    statements: list[str] = []
    scene.database.statement_listeners.append(statements.append)
    try:
        scene.deliver()
    finally:
        scene.database.statement_listeners.remove(statements.append)

    # (Other tests' tenants may have retries due: those are visited.)
    for world in idle:
        assert not any(world.tenant.schema in statement for statement in statements)


def test_one_worker_of_two_purges_events_older_than_30_days_with_their_deliveries(
    scene: Scene,
) -> None:
    endpoint = scene.add_endpoint()
    for name in ("old", "recent"):
        scene.add_customer(name)
    with scene.unit_of_work() as uow:
        deliveries.send_test(uow, endpoint.id)
    scene.deliver()
    with scene.unit_of_work() as uow:
        uow.connection.execute(
            update(events_table)
            .where(events_table.c.data["last_name"].astext == "old")
            .values(created_at=func.now() - timedelta(days=31))
        )
        uow.connection.execute(
            update(webhook_deliveries)
            .where(webhook_deliveries.c.event_id.is_(None))
            .values(created_at=func.now() - timedelta(days=31))
        )
    first, second = scene.workers(), scene.workers()
    scene.clock.advance(timedelta(days=2))  # past any purge an earlier test of the module ran

    async def both() -> tuple[int | None, int | None]:
        return await first.purge_if_due(), await second.purge_if_due()

    purged = scene.workers.run(both())

    assert purged == (2, None)  # the old event (its delivery with it) and the test delivery
    remaining = scene.log(endpoint.id)
    assert [delivery.event_type for delivery in remaining] == ["customer.created"]
    assert [event["data"]["last_name"] for event in scene.feed()] == ["recent"]  # type: ignore[index]


def test_a_worker_whose_claims_meet_a_permanent_error_logs_it_and_delivers_once_mended(
    scene: Scene, worker_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scene.add_endpoint()
    scene.add_customer("Lovelace")
    worker = scene.workers(limits=WorkerLimits(poll_interval=timedelta(milliseconds=20)))

    def failures() -> list[dict[str, Any]]:
        return [entry for entry in logs if entry["event"] == "webhook_worker_claim_failed"]

    async def run_until_it_failed_twice() -> None:
        # Until the second failure, not for a fixed time: on a busy machine a few hundred
        # milliseconds may hold only one attempt.
        stop = asyncio.Event()
        running = asyncio.ensure_future(worker.run(stop))
        try:
            await until(
                lambda: len(failures()) >= 2 or running.done(),
                "the worker's loop tried its claim again",
            )
        finally:
            stop.set()
            await running

    with (
        writes_raise(
            worker_database_url, CONTROL_SCHEMA, "webhook_wakeups", "55000", "UPDATE"
        ) as message,
        logs_of(monkeypatch, worker_delivery) as logs,
    ):
        scene.workers.run(run_until_it_failed_twice())

    assert len(failures()) >= 2  # tried again after each wait, the loop alive
    assert message in failures()[0]["error"]
    assert scene.receiver.requests == []
    scene.deliver(worker)
    assert len(scene.receiver.requests) == 1
