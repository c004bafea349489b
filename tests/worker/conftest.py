"""A database of the worker tests' own (a worker visits every tenant with a wakeup, so no other
test's endpoints may be in it), a real HTTP receiver on the loopback, and a clock the tests move.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import orjson
import pytest

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.migrations.runner import upgrade_control
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import service as events
from dealbase.platform.events.models import EventFilter, event_json
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.platform.webhooks.delivery_models import Delivery
from dealbase.platform.webhooks.models import (
    Checked,
    WebhookEndpoint,
    WebhookEndpointFields,
    WithSecret,
)
from dealbase.tenancy.scope import Scope
from dealbase.worker.delivery import DeliveryWorker
from dealbase.worker.limits import WorkerLimits
from dealbase.worker.sending import Sender
from tests.support import FakeClock, TenantWorld, build_tenant, scratch_database

T = TypeVar("T")


@pytest.fixture(scope="module")
def worker_database_url(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "worker") as url:
        database = Database(url, pool_size=1)
        with database.engine.begin() as connection:
            upgrade_control(connection)
        database.dispose()
        yield url


@pytest.fixture
def worker_database(worker_database_url: str) -> Iterator[Database]:
    database = Database(worker_database_url, pool_size=4)
    yield database
    database.dispose()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """Records every request; answers each with the next of ``answers`` (status, headers, what
    to wait for first), then with ``default``."""

    url: str
    requests: list[Received] = field(default_factory=list)
    answers: list[tuple[int, dict[str, str], threading.Event | None]] = field(default_factory=list)
    default: int = 204
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Requests begun, answered or not.
    arrived: int = 0
    server: _Server | None = None
    holds: list[threading.Event] = field(default_factory=list)

    def answer(self, *statuses: int, headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.answers += [(status, headers or {}, None) for status in statuses]

    def hold(self) -> threading.Event:
        """The next request is answered 204 only once the event returned is set (by the test,
        or at the fixture's end): not after a time, which a busy machine may overrun."""
        release = threading.Event()
        with self.lock:
            self.answers.append((204, {}, release))
            self.holds.append(release)
        return release

    def release_all(self) -> None:
        for release in self.holds:
            release.set()

    def stop(self) -> None:
        """Stops listening: connections are refused until ``start``."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def start(self) -> None:
        """Listens again, on the same port."""
        self.server = _serve(self, int(self.url.split(":")[2].split("/")[0]))

    def ids(self) -> list[str]:
        return [request.headers["webhook-id"] for request in self.requests]

    def types(self) -> list[str]:
        return [orjson.loads(request.body)["type"] for request in self.requests]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        state = self.server.state
        with state.lock:
            state.arrived += 1
            status, headers, release = (
                state.answers.pop(0) if state.answers else (state.default, {}, None)
            )
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if release is not None:
            release.wait()
        with state.lock:
            state.requests.append(
                Received({k.lower(): v for k, v in self.headers.items()}, body, time.time())
            )
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Room for every connection a worker opens at once (a refused one would be retried later).
    request_queue_size = 256
    state: Receiver


class _Server6(_Server):
    address_family = socket.AF_INET6


def _serve(state: Receiver, port: int, host: str = "127.0.0.1") -> _Server:
    server = (_Server6 if ":" in host else _Server)((host, port), _Handler)
    server.state = state
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def receiver_on_ipv6() -> Iterator[Receiver]:
    """The receiver on the IPv6 loopback, ``http://[::1]:PORT/hooks``."""
    state = Receiver(url="")
    state.server = _serve(state, 0, "::1")
    state.url = f"http://[::1]:{state.server.server_address[1]}/hooks"
    yield state
    state.release_all()
    state.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")
    state.server = _serve(state, 0)
    state.url = f"http://127.0.0.1:{state.server.server_address[1]}/hooks"
    yield state
    state.release_all()
    state.stop()


@dataclass
class Clock:
    """The workers' time: the real time moved on by what the tests skip (wakeups and events
    carry the database's real time, so the workers' may not fall behind it), until a test
    freezes it; from then on it moves only as the test moves it."""

    skipped: timedelta = timedelta(0)
    frozen_at: datetime | None = None

    def __call__(self) -> datetime:
        return (self.frozen_at or datetime.now(UTC)) + self.skipped

    def advance(self, by: timedelta) -> None:
        self.skipped += by

    def freeze(self, at: datetime | None = None) -> None:
        """Stops the clock at ``at``, or at its reading now: later than every time the database
        has stamped so far, so what is due now stays due. A test freezes it once it has written
        what the workers are to find, so that a retry due in 5 s is not due 1 ms before,
        however long the machine takes between two steps."""
        self.frozen_at, self.skipped = (at or self()), timedelta(0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


ALLOW_PRIVATE = AddressPolicy(allow_private=True)


class Workers:
    """Makes workers on the tests' database and clock, with no jitter (waits are exact) unless
    a test gives its own; ``run`` drives a scenario in an event loop of its own."""

    def __init__(self, database: Database, clock: Clock) -> None:
        self.database = database
        self.clock = clock
        # The workers' monotonic clock (a visit's budget, when the leases of the attempts it
        # sent lapse) moves only when a test moves it, as ``clock`` does once frozen.
        self.monotonic = FakeClock()
        self.made: list[DeliveryWorker] = []

    def __call__(self, policy: AddressPolicy = ALLOW_PRIVATE, **options: Any) -> DeliveryWorker:
        options.setdefault("jitter", lambda: 1.0)
        options.setdefault("limits", WorkerLimits())
        options.setdefault("monotonic", self.monotonic)
        worker = DeliveryWorker(self.database, Sender(policy), clock=self.clock, **options)
        self.made.append(worker)
        return worker

    def run(self, scenario: Coroutine[Any, Any, T]) -> T:
        async def closing() -> T:
            try:
                return await scenario
            finally:
                # An HTTP client belongs to the event loop it ran in: the next run gets another.
                for worker in self.made:
                    await worker.sender.close()
                    worker.sender = Sender(worker.sender.policy)

        return asyncio.run(closing())


@pytest.fixture
def workers(worker_database: Database, clock: Clock) -> Workers:
    return Workers(worker_database, clock)


# How long a scenario waits for something the worker is to do before the test fails: only a
# broken worker comes near it.
UNTIL_SECONDS = 30.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Returns once ``condition()`` holds, looking every 10 ms on the running loop (so the
    workers in it go on meanwhile); fails, saying ``what`` never happened, after
    ``UNTIL_SECONDS``."""
    try:
        async with asyncio.timeout(UNTIL_SECONDS):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not within {UNTIL_SECONDS:g} s: {what}") from None


@pytest.fixture
def tenant(worker_database: Database) -> TenantWorld:
    return build_tenant(worker_database)


def add_endpoint(database: Database, world: TenantWorld, url: str, **fields: Any) -> WithSecret:
    """An endpoint made through the service, its URL taken as checked (the tests' receiver is
    on the loopback, which only the policy of the worker under test may refuse)."""
    fields.setdefault("events", ["*"])
    with database.unit_of_work(in_department(world)) as uow:
        return endpoints.create(uow, Checked(WebhookEndpointFields(url=url, **fields)))


def in_department(world: TenantWorld) -> Scope:
    return world.tenant.scope.in_department(world.department.id)


def add_customer(database: Database, world: TenantWorld, last_name: str) -> None:
    with database.unit_of_work(in_department(world)) as uow:
        customers.create(uow, CustomerFields(last_name=last_name))


def deliveries_of(database: Database, world: TenantWorld, endpoint_id: uuid.UUID) -> list[Delivery]:
    """The endpoint's deliveries, oldest first."""
    with database.unit_of_work(in_department(world)) as uow:
        return list(reversed(deliveries.list_page(uow, endpoint_id, 100, None).items))


@dataclass(frozen=True)
class Scene:
    """A tenant of the worker tests' database, the receiver its endpoints send to, and the
    workers that deliver its events on the clock the test moves."""

    database: Database
    tenant: TenantWorld
    receiver: Receiver
    workers: Workers
    clock: Clock

    def unit_of_work(self) -> AbstractContextManager[UnitOfWork]:
        """A unit of work in the tenant's department."""
        return self.database.unit_of_work(in_department(self.tenant))

    def add_endpoint(self, url: str | None = None, **fields: Any) -> WithSecret:
        """An endpoint of the tenant's, sending to ``url`` (the receiver's unless given)."""
        return add_endpoint(self.database, self.tenant, url or self.receiver.url, **fields)

    def add_customer(self, last_name: str) -> None:
        add_customer(self.database, self.tenant, last_name)

    def deliver(self, worker: DeliveryWorker | None = None) -> None:
        """Runs ``worker`` (a new one unless given) until it has nothing left to do now."""
        self.workers.run((worker or self.workers()).run_until_idle())

    def last_names_received(self) -> list[str]:
        """The last names of the customers whose events the receiver got, in order."""
        return [
            orjson.loads(request.body)["data"]["last_name"] for request in self.receiver.requests
        ]

    def feed(self) -> list[dict[str, object]]:
        with self.unit_of_work() as uow:
            page = events.feed(uow, EventFilter(), 100, None)
        return [event_json(event) for event in page.items]

    def log(self, endpoint_id: uuid.UUID) -> list[Delivery]:
        return deliveries_of(self.database, self.tenant, endpoint_id)

    def endpoint(self, endpoint_id: uuid.UUID) -> WebhookEndpoint:
        with self.unit_of_work() as uow:
            return endpoints.get(uow, endpoint_id)


@pytest.fixture
def scene(
    worker_database: Database,
    tenant: TenantWorld,
    receiver: Receiver,
    workers: Workers,
    clock: Clock,
) -> Scene:
    return Scene(worker_database, tenant, receiver, workers, clock)
