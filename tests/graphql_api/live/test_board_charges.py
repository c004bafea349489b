"""A board sent after a subscription's first runs the subscription's document again (its steps'
deals read afresh), as costly as a request: it is admitted by the subscriber's key's and tenant's
rate limits, one unit each, as the subscribe was. Refused, the subscription is neither closed nor
sent an error: it waits out the retry time (on the event loop's clock, which these tests move)
and then gets the newest board. So the boards a key's subscriptions run are bounded by its rate,
however many subscriptions it holds.

The two transports share that path (``Subscriber.next``, under Strawberry's stream of results);
each is tested all the same."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.errors import RateLimited
from dealbase.ops import admin
from dealbase.tenancy.rate_limits.admission import Admission
from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Rate, Scope
from tests.graphql_api.live_support import (
    API,
    BOARD,
    WAIT_SECONDS,
    LiveSocket,
    Stream,
    live_socket,
    stream,
)
from tests.support import Credentials, LoopClock, TenantWorld

# The subscriber's key: 4 units at once, then 1 a second. The app's own limits (the writer's
# key's, the tenant's) are far above what the tests spend.
BURST = 4
RETRY_S = 1.0
# Another document than BOARD: the observer's executions are not the subscriber's.
OBSERVED = "subscription Observed { pipelineBoard { steps { dealCount } } }"


@pytest.fixture(scope="module")
def loop_clock() -> LoopClock:
    return LoopClock()


@pytest.fixture(scope="module")
def paced(settings: Settings, loop_clock: LoopClock) -> Iterator[TestClient]:
    """The service on an event loop whose clock only the tests move, its rate limits on the same
    clock: a refused board waits until a test moves it past the retry time."""
    app = create_app(settings, clock=loop_clock.clock)
    with TestClient(
        app, raise_server_exceptions=False, backend_options={"loop_factory": loop_clock.new_loop}
    ) as client:
        yield client


class Verdicts:
    """The app's verdicts on one key, in order (True: admitted), as its Admission gives them:
    the connection's, the subscribe's (a WebSocket's), then each board's after the first."""

    def __init__(
        self, admission: Admission, key_id: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.given: list[bool] = []
        self._changed = threading.Condition()
        admit = admission.admit

        async def watched(
            scope: Scope, record: Callable[[Verdict], None], *, limiter_answers: bool = True
        ) -> None:
            try:
                await admit(scope, record, limiter_answers=limiter_answers)
            except RateLimited:
                self._note(scope, False)
                raise
            self._note(scope, True)

        self._key_id = key_id
        monkeypatch.setattr(admission, "admit", watched)

    def _note(self, scope: Scope, admitted: bool) -> None:
        if scope.key_id == self._key_id:
            with self._changed:
                self.given.append(admitted)
                self._changed.notify_all()

    def wait_for_refusals(self, count: int) -> None:
        """Returns once the key has been refused ``count`` times (a board waits)."""
        with self._changed:
            refused = self._changed.wait_for(
                lambda: self.given.count(False) >= count, timeout=WAIT_SECONDS
            )
            assert refused, f"not {count} refusals in {WAIT_SECONDS} s: {self.given}"

    def wait_for_a_refusal(self) -> None:
        self.wait_for_refusals(1)


def _admission(client: TestClient) -> Admission:
    app: FastAPI = client.app  # type: ignore[assignment]
    admission: Admission = app.state.admission
    return admission


def _limited_key(database: Database, world: TenantWorld) -> Credentials:
    """A second key of ``world``'s department with a rate of its own: burst ``BURST``, 1/s."""
    issued = admin.issue_key(
        database, world.tenant.id, world.department.id, "paced", Rate(1.0, BURST)
    )
    return Credentials(issued.key_id, issued.api_key, world.department.id)


def _deal_count(data: dict[str, Any]) -> int:
    count: int = data["pipelineBoard"]["steps"][0]["dealCount"]
    return count


class Observer:
    """The writer: the department's own key (not the subscriber's), and a board subscription of
    it. Once it has the board after a change, the subscriber's board after that change is in the
    hub too (the channel hands it to both)."""

    def __init__(self, client: TestClient, world: TenantWorld, socket: LiveSocket) -> None:
        self.client, self.world, self.socket = client, world, socket
        socket.subscribe("observed", OBSERVED)
        socket.next_data("observed")

    def write_deal(self, volume: int) -> None:
        """A change of a deal, once the hub has read the board after it."""
        response = self.client.post(
            f"{API}/deals",
            json={"name": f"Deal {volume}", "volume": volume, "customers": []},
            headers=self.world.key.headers,
        )
        assert response.status_code == 201, response.text
        assert _deal_count(self.socket.next_data("observed")) == volume


@dataclass(frozen=True)
class Subscriber:
    """The subscriber's key (``_limited_key``), and the app's verdicts on it."""

    client: TestClient
    key: Credentials
    verdicts: Verdicts

    def socket(self) -> AbstractContextManager[LiveSocket]:
        return live_socket(self.client, init=self.key.headers)

    def stream(self, document: str) -> AbstractContextManager[Stream]:
        return stream(self.client, self.key.headers, document)


@pytest.fixture
def subscriber(
    paced: TestClient, database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> Subscriber:
    key = _limited_key(database, world)
    return Subscriber(paced, key, Verdicts(_admission(paced), key.key_id, monkeypatch))


@pytest.fixture
def observer(paced: TestClient, world: TenantWorld) -> Iterator[Observer]:
    """The writer's own board subscription, open while the test runs."""
    with live_socket(paced, init=world.key.headers) as watching:
        yield Observer(paced, world, watching)


def _spend_the_burst(observer: Observer, socket: LiveSocket, verdicts: Verdicts) -> list[int]:
    """Subscribes ``socket`` to the board and changes deals until its key is refused a board:
    the first board and the next two pass (the connection and the subscribe spent the other two
    of the burst of four), the third change's waits. The deal counts of the boards received."""
    socket.subscribe("1", BOARD)
    boards = [_deal_count(socket.next_data("1"))]
    for deals in (1, 2):
        observer.write_deal(deals)
        boards.append(_deal_count(socket.next_data("1")))
    observer.write_deal(3)
    verdicts.wait_for_a_refusal()
    return boards


def test_a_keys_board_runs_at_most_its_burst_then_its_rate_and_then_shows_the_newest_board(
    loop_clock: LoopClock, subscriber: Subscriber, observer: Observer
) -> None:
    """The clock still: the connection and the subscribe spend two of the key's four units, the
    boards after the first two changes the other two. The third change's board is refused and
    waits, and the three changes after it replace it. Once the clock has moved past the retry
    time one board runs, the newest: six changes ran three boards, what the burst and one
    second allow, where each change ran one before."""
    verdicts = subscriber.verdicts
    with subscriber.socket() as socket:
        boards = _spend_the_burst(observer, socket, verdicts)
        for deals in (4, 5, 6):
            observer.write_deal(deals)
        while_refused = list(verdicts.given)
        loop_clock.advance(RETRY_S)
        boards.append(_deal_count(socket.next_data("1")))
        after = list(verdicts.given)

    assert boards == [0, 1, 2, 6]
    # The connection's, the subscribe's, two boards', the refused one's; then the newest board's.
    assert while_refused == [True, True, True, True, False]
    assert after == [*while_refused, True]


def test_a_refused_board_neither_closes_the_subscription_nor_sends_an_error(
    loop_clock: LoopClock, subscriber: Subscriber, observer: Observer
) -> None:
    """While its board waits for the key's rate, the WebSocket answers a ping, and nothing came
    before the pong (no error, no complete); once the clock moves, the board comes as a `next`
    without errors, and the subscription goes on: the next refused board comes in its turn."""
    verdicts = subscriber.verdicts
    with subscriber.socket() as socket:
        _spend_the_burst(observer, socket, verdicts)
        socket.send({"type": "ping"})
        assert socket.receive() == {"type": "pong"}
        loop_clock.advance(RETRY_S)
        after_the_wait = socket.receive()
        assert (after_the_wait["id"], after_the_wait["type"]) == ("1", "next"), after_the_wait
        assert "errors" not in after_the_wait["payload"]
        # The second's unit is spent: the next board is refused too, and comes a second later.
        observer.write_deal(4)
        verdicts.wait_for_refusals(2)
        loop_clock.advance(RETRY_S)
        next_turn = socket.next_data("1")

    assert _deal_count(after_the_wait["payload"]["data"]) == 3
    assert _deal_count(next_turn) == 4


def test_on_the_event_stream_too_a_refused_board_waits_for_the_keys_rate_then_is_the_newest(
    loop_clock: LoopClock, subscriber: Subscriber, observer: Observer
) -> None:
    """A stream spends one unit when it opens (it has no subscribe of its own), so three boards
    pass before the fourth change's is refused; the stream stays open, and once the clock has
    moved past the retry time its next event is the newest board, without errors."""
    verdicts = subscriber.verdicts
    with subscriber.stream(BOARD) as events:
        boards = [_deal_count(events.next_event().data["data"])]
        for deals in (1, 2, 3):
            observer.write_deal(deals)
            boards.append(_deal_count(events.next_event().data["data"]))
        observer.write_deal(4)
        verdicts.wait_for_a_refusal()
        observer.write_deal(5)
        while_refused = list(verdicts.given)
        loop_clock.advance(RETRY_S)
        newest = events.next_event()
        after = list(verdicts.given)

    assert boards == [0, 1, 2, 3]
    assert while_refused == [True, True, True, True, False]
    assert newest.event == "next"
    assert "errors" not in newest.data
    assert _deal_count(newest.data["data"]) == 5
    assert after == [*while_refused, True]
