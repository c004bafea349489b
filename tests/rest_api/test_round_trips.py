"""Round trips to PostgreSQL per write: the opening (the role switch where the connection does
not hold the tenant's role, BEGIN where the unit of work is more than one round trip) travels
with the first statement, the events with the COMMIT. Counted where every statement of a unit
of work goes (``counted_round_trips``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from dealbase.config import Settings
from dealbase.db.database import PREPARE_AFTER
from dealbase.db.transactions import TenantConnection
from tests.db.test_transactions import round_trips_sent
from tests.rest_api.test_events import API
from tests.support import TenantWorld


@contextmanager
def counted_round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many round trips units of work sent meanwhile (one element, read after), counted
    where every statement of a unit of work goes (``TenantConnection._round_trip``), so the
    count holds whatever the platform's code does. Directly each is one exchange with the
    server (a statement alone, or a pipeline ending in one Sync); behind pgbouncer, one a
    statement (tests/db/test_transactions.py)."""
    count = [0]
    round_trip = TenantConnection._round_trip

    def counted(self: TenantConnection, calls: list[Any]) -> Any:
        count[0] += 1
        return round_trip(self, calls)

    with monkeypatch.context() as patched:
        patched.setattr(TenantConnection, "_round_trip", counted)
        yield count


def _send(
    client: TestClient, world: TenantWorld, method: str, path: str, body: dict[str, Any]
) -> Response:
    response: Response = client.request(
        method, f"{API}{path}", json=body, headers=world.key.headers
    )
    return response


def _round_trips(
    monkeypatch: pytest.MonkeyPatch, request: Callable[[], Response], status: int
) -> int:
    with counted_round_trips(monkeypatch) as count:
        response = request()
    assert response.status_code == status, response.text
    return count[0]


def test_a_customer_create_is_one_round_trip(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _send(client, world, "POST", "/customers", {"last_name": "Warm"})  # the key cached

    trips = _round_trips(
        monkeypatch,
        lambda: _send(client, world, "POST", "/customers", {"last_name": "Lovelace"}),
        201,
    )

    # The INSERT with its event (after the role switch where needed), its own transaction.
    assert trips == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/customers", {"last_name": "Lovelace", "birthday": "1990-12-10"}),
        ("/deals", {"name": "Engine", "volume": 5, "customers": [{"last_name": "A"}] * 3}),
    ],
    ids=["customer", "deal"],
)
def test_a_create_on_a_connection_in_its_tenants_role_is_its_statement_alone(
    client: TestClient,
    settings: Settings,
    world: TenantWorld,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    body: dict[str, Any],
) -> None:
    """Once a connection has committed a unit of work of the tenant's (the tenant's warm one,
    which its creates keep landing on), it keeps the tenant's role, and a create sends its one
    statement alone; behind pgbouncer each transaction opens, switches and commits for itself,
    one exchange a statement. The same answer either way."""
    for _ in range(PREPARE_AFTER):
        assert _send(client, world, "POST", path, body).status_code == 201

    with round_trips_sent(monkeypatch) as sent, counted_round_trips(monkeypatch) as trips:
        created = _send(client, world, "POST", path, body)

    assert created.status_code == 201, created.text
    assert trips == [1]
    if settings.db_pgbouncer:  # one exchange a statement, in a transaction of its own
        assert [trip[0] for trip in sent][::3] == ["BEGIN", "COMMIT"] and len(sent) == 4
    else:
        assert len(sent) == 1 and len(sent[0]) == 1
    shown = created.json()
    assert {name: shown[name] for name in body if name != "customers"} == {
        name: value for name, value in body.items() if name != "customers"
    }
    if "customers" in body:
        assert [customer["last_name"] for customer in shown["customers"]] == ["A"] * 3
    fetched = client.get(f"{API}{path}/{shown['id']}", headers=world.key.headers)
    assert fetched.json() == shown


def test_a_customer_create_with_an_idempotency_key_is_four_round_trips(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _send(client, world, "POST", "/customers", {"last_name": "Warm"})

    def create() -> Response:
        response: Response = client.post(
            f"{API}/customers",
            json={"last_name": "Lovelace"},
            headers={**world.key.headers, "Idempotency-Key": "sync-0001"},
        )
        return response

    trips = _round_trips(monkeypatch, create, 201)

    # BEGIN (and the switch) with the key's lock; the stored response, if any (after the
    # lock, in a snapshot of its own); the INSERT; the expired record's deletion, the response
    # stored, the events and COMMIT.
    assert trips == 4


def test_a_deal_with_three_new_customers_is_one_round_trip(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _send(client, world, "POST", "/customers", {"last_name": "Warm"})
    body = {"name": "Engine", "customers": [{"last_name": name} for name in "ABC"]}

    trips = _round_trips(monkeypatch, lambda: _send(client, world, "POST", "/deals", body), 201)

    # One statement writing the deal (in the first step, found by its
    # INSERT), its customers, their links and the events.
    assert trips == 1


@pytest.mark.parametrize(
    ("path", "body", "patch"),
    [
        ("/customers", {"last_name": "Lovelace"}, {"city": "London"}),
        ("/deals", {"name": "Engine"}, {"volume": 5}),
        ("/activities", {"type": "call", "customer_id": None}, {"subject": "Second call"}),
    ],
    ids=["customer", "deal", "activity"],
)
def test_a_patch_is_one_round_trip_with_its_events(
    client: TestClient,
    world: TenantWorld,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    body: dict[str, Any],
    patch: dict[str, Any],
) -> None:
    if "customer_id" in body:  # an activity is about a customer
        customer = _send(client, world, "POST", "/customers", {"last_name": "Called"}).json()
        body = {**body, "customer_id": customer["id"]}
    record = _send(client, world, "POST", path, body).json()
    # Read once: the process then knows the tenant's custom fields, which it reads once.
    client.get(f"{API}{path}/{record['id']}", headers=world.key.headers).raise_for_status()

    with counted_round_trips(monkeypatch) as trips:
        changed = _send(client, world, "PATCH", f"{path}/{record['id']}", patch)

    # One statement changing the record and recording its events.
    assert changed.status_code == 200, changed.text
    assert trips == [1]
    assert changed.json() == {**record, **patch, "updated_at": changed.json()["updated_at"]}
    assert changed.headers["ETag"] == '"2"'
    fetched = client.get(f"{API}{path}/{record['id']}", headers=world.key.headers)
    assert fetched.json() == changed.json()
    feed = client.get(f"{API}/events", headers=world.key.headers).json()["data"]
    updated = [event for event in feed if event["type"].endswith(".updated")]
    assert [(event["changed_fields"], event["previous"]) for event in updated] == [
        (list(patch), {name: record[name] for name in patch})
    ]
    assert updated[0]["data"] == changed.json()


@pytest.mark.parametrize("resource", ["customers", "activities"])
def test_an_upsert_that_creates_and_one_that_changes_are_one_round_trip_each(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch, resource: str
) -> None:
    customer = _send(client, world, "POST", "/customers", {"last_name": "Called"}).json()
    data = {"type": "call", "customer_id": customer["id"]} if resource == "activities" else {}
    path = f"/{resource}/by-external-id/shop-1"
    name = "subject" if resource == "activities" else "last_name"

    with counted_round_trips(monkeypatch) as creating:
        created = _send(client, world, "PUT", path, {**data, name: "First"})
    with counted_round_trips(monkeypatch) as changing:
        changed = _send(client, world, "PUT", path, {**data, name: "Second"})

    # One statement locking and judging the external id and writing the record with its
    # event.
    assert (created.status_code, changed.status_code) == (201, 200), changed.text
    assert (creating, changing) == ([1], [1])
    assert changed.json() == {
        **created.json(),
        name: "Second",
        "updated_at": changed.json()["updated_at"],
    }
    assert changed.headers["ETag"] == '"2"'
    feed = client.get(f"{API}/events", headers=world.key.headers).json()["data"]
    mine = [event for event in feed if event["data"]["id"] == created.json()["id"]]
    assert [(event["type"], event.get("previous")) for event in mine] == [
        (f"{resource.rstrip('s').replace('tie', 'ty')}.created", None),
        (f"{resource.rstrip('s').replace('tie', 'ty')}.updated", {name: "First"}),
    ]


def test_a_batch_of_creates_changes_and_failures_is_one_round_trip(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _send(client, world, "PUT", "/customers/by-external-id/b-0", {"last_name": "Before"})
    _send(client, world, "PUT", "/customers/by-external-id/b-taken", {"last_name": "Before"})
    operations = [
        {"op": "upsert", "external_id": f"b-{n}", "data": {"last_name": "B"}} for n in range(3)
    ]
    operations.append({"op": "create", "data": {"last_name": "Taken", "external_id": "b-taken"}})

    with counted_round_trips(monkeypatch) as trips:
        answered = _send(client, world, "POST", "/customers/batch", {"operations": operations})

    # One statement for the whole batch with its events.
    assert answered.status_code == 200, answered.text
    assert trips == [1]
    results = answered.json()["results"]
    assert [result["outcome"] for result in results] == ["updated", "created", "created", "failed"]
    assert results[3]["error"]["code"] == "external_id_taken"


@pytest.mark.parametrize("path", ["/customers/{id}", "/customers?limit=50", "/deals?limit=50"])
def test_a_read_is_one_round_trip(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    customer = _send(client, world, "POST", "/customers", {"last_name": "Read"}).json()
    _send(client, world, "POST", "/deals", {"name": "Engine", "customers": [{"last_name": "A"}]})
    url = path.format(id=customer["id"])

    trips = _round_trips(monkeypatch, lambda: _send(client, world, "GET", url, {}), 200)

    # The read, its own transaction.
    assert trips == 1


def test_a_feed_read_that_numbers_sends_its_numbering_read_and_commit_together(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _send(client, world, "POST", "/customers", {"last_name": "Warm"})
    client.get(f"{API}/events", headers=world.key.headers)  # numbered, the key cached
    _send(client, world, "POST", "/customers", {"last_name": "Unnumbered"})

    trips = _round_trips(
        monkeypatch, lambda: client.get(f"{API}/events", headers=world.key.headers), 200
    )

    # The claim of the department's position row (with BEGIN); then the numbering, the page
    # and COMMIT in one, so the row is held for that round trip alone.
    assert trips == 2
