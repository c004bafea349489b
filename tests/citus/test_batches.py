"""Creates and upserts by external id on a distributed schema, alone and in batches, whose
statements differ from the single server's (``batches.routed_writes``): the same answers and the
same events as on a single server, each statement routed whole, round trips as many whatever
the batch's size, and the same new external id upserted by transactions at once one record."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import distinct, func, select, text

from dealbase.db import transactions
from dealbase.db.database import Database
from dealbase.platform.tables import events
from tests.citus.plans import assert_routed_whole, statements_sent
from tests.platform.batches.test_upsert_races import (
    RECORDS,
    Synced,
    _written,
    upsert_meeting_an_uncommitted_insert,
    upserts_at_once,
)
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock

API = "/api/v1/integration"
# What a run of the same requests writes differently in another tenant: ids and times.
_IDS_AND_TIMES = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"
)


class Sameness:
    """Each id and time of a run as the order it first appeared in (``#0``, ``#3``), its
    problems without their request ids: two runs of the same requests then read alike."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return [(k, self(v)) for k, v in value.items() if k != "request_id"]
        if isinstance(value, list | tuple):
            return [self(each) for each in value]
        if isinstance(value, str) and _IDS_AND_TIMES.fullmatch(value):
            return self.seen.setdefault(value, f"#{len(self.seen)}")
        return value


def _sync(client: TestClient, world: TenantWorld, plural: str) -> list[Any]:
    """A record's creates and upserts, alone and in batches, per operation and atomic, failing
    and not (each answer's status and body), then the events they recorded, in order."""
    headers = world.key.headers
    required: dict[str, Any] = {}
    label = "last_name" if plural == "customers" else "subject"
    if plural == "activities":
        made = client.post(f"{API}/customers", json={"last_name": "Owner"}, headers=headers)
        required = {"type": "call", "customer_id": made.json()["id"]}

    def upsert(external_id: str, value: str, **fields: Any) -> dict[str, Any]:
        data = {**required, label: value, **fields}
        return {"op": "upsert", "external_id": external_id, "data": data}

    def create(value: str, **fields: Any) -> dict[str, Any]:
        return {"op": "create", "data": {**required, label: value, **fields}}

    def batch(operations: list[dict[str, Any]], atomic: bool = False) -> Any:
        return client.post(
            f"{API}/{plural}/batch",
            params={"atomic": "true"} if atomic else None,
            json={"operations": operations},
            headers=headers,
        )

    def put(external_id: str, value: str, **conditions: str) -> Any:
        body = {**required, label: value, "note": "Put"}
        url = f"{API}/{plural}/by-external-id/{external_id}"
        return client.put(url, json=body, headers={**headers, **conditions})

    unknown = {"customer_id": str(uuid.uuid4())} if plural == "activities" else {}
    dated = (
        {"due_at": "2026-01-02T03:04:05.123456+02:00"}
        if plural == "activities"
        else {"birthday": "1990-02-03", "city": 'Zürich \\ "O\'Brien"\n'}
    )
    answers = [
        batch([upsert("a", "A"), upsert("b", "B", **dated), create("Plain"), upsert("c", "C")]),
        batch(
            [
                upsert("a", "A2", note="Noted"),
                create("Twin", external_id="b"),
                upsert("d", "x" * 256),
                create("New"),
                upsert("c", "C"),
                upsert("e", "E", **unknown),
            ]
        ),
        batch([upsert("f", "F"), upsert("a", "A3"), create("Twin", external_id="c")], atomic=True),
        batch([upsert("f", "F"), upsert("a", "A3", note="Atomic"), create("G")], atomic=True),
        put("g", "G", **{"If-None-Match": "*"}),
        put("g", "G", **{"If-None-Match": "*"}),
        put("g", "G2", **{"If-Match": '"7"'}),
        put("h", "H", **{"If-Match": "*"}),
        put("g", "G2", **{"If-Match": '"1"'}),
        put("g", "G2"),
    ]
    events = client.get(f"{API}/events", params={"limit": 100}, headers=headers)
    return [
        *((each.status_code, each.json()) for each in answers),
        events.json()["data"],
        _alike(events.text),
    ]


def _alike(shown: str) -> str:
    """``shown`` with each id and time as the order it first appeared in."""
    seen: dict[str, str] = {}
    return _IDS_AND_TIMES.sub(lambda found: seen.setdefault(found[0], f"#{len(seen)}"), shown)


@pytest.mark.parametrize("plural", ["customers", "activities"])
def test_creates_and_upserts_answer_and_record_events_as_on_a_single_server(
    client: TestClient,
    world: TenantWorld,
    cluster_client: TestClient,
    cluster_world: TenantWorld,
    plural: str,
) -> None:
    single = _sync(client, world, plural)
    distributed = _sync(cluster_client, cluster_world, plural)

    assert [status for status, _ in distributed[:-2]] == [
        200,
        200,
        422,
        200,
        201,
        412,
        412,
        412,
        200,
        200,
    ]
    # Every answer and event alike, ids and times where they first appeared (the events' JSON
    # text too, byte for byte), the fields of a change's ``previous`` in the order of its
    # ``changed_fields``.
    assert Sameness()(distributed) == Sameness()(single)
    updated = [each for each in distributed[-2] if each["type"].endswith(".updated")]
    assert [list(each["previous"]) for each in updated] == [
        each["changed_fields"] for each in updated
    ]


def test_each_statement_of_creates_and_upserts_is_routed_whole(
    cluster_client: TestClient,
    cluster_world: TenantWorld,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with statements_sent(monkeypatch) as sent:
        for plural in ("customers", "activities"):
            _sync(cluster_client, cluster_world, plural)

    assert_routed_whole(citus_url, sent)


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many round trips units of work make meanwhile (a one-element list)."""
    made = [0]
    on_the_loop = transactions._round_trip_async

    async def counted(connection: Any, calls: list[Any]) -> Any:
        made[0] += 1
        return await on_the_loop(connection, calls)

    monkeypatch.setattr(transactions, "_round_trip_async", counted)
    return made


@pytest.mark.parametrize("plural", ["customers", "activities"])
def test_a_batch_makes_as_many_round_trips_whatever_its_size(
    cluster_client: TestClient, cluster_world: TenantWorld, round_trips: list[int], plural: str
) -> None:
    headers = cluster_world.key.headers
    required: dict[str, Any] = {}
    if plural == "activities":
        made = cluster_client.post(f"{API}/customers", json={"last_name": "O"}, headers=headers)
        required = {"type": "call", "customer_id": made.json()["id"]}
    label = "last_name" if plural == "customers" else "subject"

    def synced(size: int) -> int:
        """The round trips of a batch that creates one record, changes half the others."""
        ids = [f"{size}-{n}" for n in range(size)]

        def send(value: Callable[[int], str]) -> None:
            operations = [
                {"op": "upsert", "external_id": each, "data": {**required, label: value(n)}}
                for n, each in enumerate(ids)
            ]
            body = {"operations": [*operations, {"op": "create", "data": {**required, label: "N"}}]}
            response = cluster_client.post(f"{API}/{plural}/batch", json=body, headers=headers)
            assert response.status_code == 200, response.text

        send(lambda n: "L")
        round_trips[0] = 0
        send(lambda n: "X" if n % 2 else "L")
        return round_trips[0]

    # The judging SELECT; the writes, their events and the COMMIT.
    assert synced(10) == synced(500) == 2


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_many_upserts_of_one_new_external_id_at_once_make_one_record(
    cluster_database: Database, cluster_world: TenantWorld, record: str
) -> None:
    synced = RECORDS[record]

    outcomes = upserts_at_once(cluster_database, cluster_world, synced)

    assert outcomes.count("created") == 1
    assert set(outcomes) <= {"created", "updated"}
    assert len(_written(cluster_database, cluster_world, synced, "sync-2")) == 1


def _lock_waits(database: Database) -> Callable[[], bool]:
    """Whether a transaction of the cluster waits on another's lock (on a worker: the
    coordinator's backend waits on the worker, not on a lock of its own)."""

    def waits() -> bool:
        with database.control() as connection:
            return bool(connection.execute(text("SELECT count(*) FROM citus_lock_waits")).scalar())

    return waits


@pytest.mark.parametrize("record", ["customer", "activity"])
def test_a_bulk_upsert_that_meets_an_uncommitted_insert_waits_runs_again_and_updates(
    cluster_database: Database, cluster_world: TenantWorld, record: str
) -> None:
    synced: Synced = RECORDS[record]

    outcome = upsert_meeting_an_uncommitted_insert(
        cluster_database,
        cluster_world,
        synced,
        lambda: wait_until_a_transaction_waits_for_a_lock(
            cluster_database, 30, or_until=_lock_waits(cluster_database)
        ),
        timeout=60,
    )

    assert outcome == "updated"
    assert _written(cluster_database, cluster_world, synced, "sync-1") == [("Second", 2)]


def test_a_batchs_events_keep_its_transactions_one_number(
    cluster_client: TestClient, cluster_world: TenantWorld, cluster_database: Database
) -> None:
    """Each event statement sets the transaction's number (``events.sequence``) as Citus
    computes its functions (each branch), yet all the transaction's events keep its first."""
    headers = cluster_world.key.headers

    def send(labels: dict[str, str]) -> None:
        operations = [
            {"op": "upsert", "external_id": external_id, "data": {"last_name": label}}
            for external_id, label in labels.items()
        ]
        body = {"operations": [*operations, {"op": "create", "data": {"last_name": "N"}}]}
        response = cluster_client.post(f"{API}/customers/batch", json=body, headers=headers)
        assert response.status_code == 200, response.text

    send({f"c-{n}": "L" for n in range(40)})
    send({f"c-{n}": "X" if n % 2 else "L" for n in range(40)})

    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    with cluster_database.unit_of_work(scope) as uow:
        numbers = uow.connection.execute(
            select(func.count(distinct(events.c.sequence)), func.count()).select_from(events)
        ).one()
    assert tuple(numbers) == (2, 41 + 21)
