"""PUT /{records}/by-external-id/{external_id} and POST /{records}/batch as every synced record
answers them (customers, deals, activities): the conditional headers of an upsert, a create's
taken external id, the body's external id against the path's, and an external id's reach (one
department of one tenant). What is particular to one record is in its own module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.platform.batches.models import MAX_OPERATIONS
from tests.rest_api.records_support import API, RECORDS, SyncedApi, SyncingKey, refused_fields
from tests.support import TenantWorld


def _events(client: TestClient, headers: dict[str, str]) -> list[tuple[str, str | None]]:
    """The department's events, each as its type and its record's external id."""
    page = client.get(f"{API}/events", params={"limit": 100}, headers=headers).json()
    return [(event["type"], event["data"].get("external_id")) for event in page["data"]]


@pytest.fixture
def syncing(client: TestClient, world: TenantWorld, record: SyncedApi) -> SyncingKey:
    """Each record's routes as the key of ``world``'s department calls them."""
    return SyncingKey(client, record, world.key.headers, record.required(client, world.key.headers))


def test_if_match_needs_the_record_at_that_version(syncing: SyncingKey) -> None:
    syncing.put("sync-1", "A")

    stale = syncing.put("sync-1", "B", {"If-Match": '"7"'})
    missing = syncing.put("sync-2", "B", {"If-Match": "*"})
    current = syncing.put("sync-1", "B", {"If-Match": '"1"'})

    assert (stale.status_code, missing.status_code, current.status_code) == (412, 412, 200)
    assert stale.json()["code"] == missing.json()["code"] == "precondition_failed"
    assert current.json()[syncing.record.label] == "B"
    assert syncing.labels("sync-2") == []


def test_if_none_match_star_only_creates(syncing: SyncingKey) -> None:
    created = syncing.put("sync-1", "A", {"If-None-Match": "*"})
    again = syncing.put("sync-1", "B", {"If-None-Match": "*"})

    assert (created.status_code, again.status_code) == (201, 412)
    assert again.json()["code"] == "precondition_failed"
    assert syncing.labels() == ["A"]


def test_if_none_match_with_etags_refuses_only_at_those_versions(syncing: SyncingKey) -> None:
    syncing.put("sync-1", "A")

    at_it = syncing.put("sync-1", "B", {"If-None-Match": '"1"'})
    elsewhere = syncing.put("sync-1", "B", {"If-None-Match": '"5", "6"'})
    new = syncing.put("sync-2", "C", {"If-None-Match": '"1"'})

    assert (at_it.status_code, elsewhere.status_code, new.status_code) == (412, 200, 201)
    assert elsewhere.json()[syncing.record.label] == "B"


def test_creating_with_a_taken_external_id_is_a_conflict_and_writes_nothing(
    syncing: SyncingKey,
) -> None:
    record = syncing.record
    syncing.put("sync-1", "First")

    response = syncing.client.post(
        f"{API}/{record.plural}",
        json=record.body(syncing.required, "Twin", external_id="sync-1"),
        headers=syncing.headers,
    )

    assert response.status_code == 409
    assert response.json()["code"] == "external_id_taken"
    assert syncing.labels() == ["First"]


def test_the_body_may_repeat_the_paths_external_id_but_not_contradict_it(
    syncing: SyncingKey,
) -> None:
    same = syncing.put("sync-1", "A", external_id="sync-1")
    other = syncing.put("sync-2", "A", external_id="sync-3")

    assert same.status_code == 201
    assert refused_fields(other) == [("external_id", "mismatch")]


def test_an_external_id_names_a_record_of_one_department_of_one_tenant(
    client: TestClient, make_tenant: Callable[..., TenantWorld], record: SyncedApi
) -> None:
    tenant = make_tenant(departments=2)
    other_tenant = make_tenant()
    callers = [
        (tenant.keys[0].headers, "First"),
        (tenant.keys[1].headers, "Second"),
        (other_tenant.key.headers, "Other"),
    ]
    required = [record.required(client, headers) for headers, _ in callers]
    made = record.put(client, callers[0][0], "sync-1", record.body(required[0], "First")).json()

    # Another department's key cannot reach it: If-Match finds no record there.
    hidden = record.put(
        client,
        callers[1][0],
        "sync-1",
        record.body(required[1], "Taken?"),
        **{"If-Match": "*"},
    )
    assert hidden.status_code == 412
    for (headers, label), given in list(zip(callers, required, strict=True))[1:]:
        response = record.put(client, headers, "sync-1", record.body(given, label))
        assert response.status_code == 201, label
        assert response.json()["id"] != made["id"]
    # A batch's upsert reaches the same record as a PUT of its caller.
    operation = {
        "op": "upsert",
        "external_id": "sync-1",
        "data": record.body(required[1], "Second again"),
    }
    batch = client.post(
        f"{API}/{record.plural}/batch", json={"operations": [operation]}, headers=callers[1][0]
    ).json()
    assert batch["results"][0]["outcome"] == "updated"

    expected = ["First", "Second again", "Other"]
    for (headers, _), label in zip(callers, expected, strict=True):
        assert record.labels(client, headers, "sync-1") == [label]


class StatementCounter:
    """Counts the statements units of work send, reads without locks left out (the events
    finisher's, the idempotency check's and the references' are one each, for any batch)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, statement: str) -> None:
        if not statement.startswith("SELECT") or " FOR UPDATE" in statement:
            self.count += 1


@pytest.fixture
def tenant_statements(client: TestClient) -> Iterator[StatementCounter]:
    database: Database = client.app.state.database  # type: ignore[attr-defined]
    counter = StatementCounter()
    database.statement_listeners.append(counter)
    try:
        yield counter
    finally:
        database.statement_listeners.remove(counter)


@pytest.mark.parametrize("plural", ["customers", "activities"])
def test_a_batch_of_a_record_written_in_bulk_costs_the_same_statements_whatever_its_size(
    client: TestClient, world: TenantWorld, tenant_statements: StatementCounter, plural: str
) -> None:
    record = RECORDS[plural]
    headers = world.key.headers
    required = record.required(client, headers)

    def send(operations: list[dict[str, Any]]) -> Any:
        response = record.batch(client, headers, operations)
        assert response.status_code == 200, response.text
        return response.json()

    def upsert(external_id: str, label: str = "L") -> dict[str, Any]:
        return record.upsert_operation(external_id, label, **required)

    counts = {}
    for size in (10, MAX_OPERATIONS - 2):
        send([upsert(f"{size}-{n}") for n in range(size)])
        changed = [upsert(f"{size}-{n}", "X" if n % 2 else "L") for n in range(size)]
        tenant_statements.count = 0
        create = record.create_operation(**required)
        body = send([*changed, create, upsert(f"{size}-new")])
        counts[size] = tenant_statements.count
        assert body["summary"] == {
            "created": 2,
            "updated": size // 2,
            "unchanged": size // 2,
            "failed": 0,
        }

    assert counts[10] == counts[MAX_OPERATIONS - 2], counts
    assert counts[10] <= 6, counts


def test_by_default_a_failed_operation_of_a_batch_leaves_the_others_written(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)
    upsert, create = record.upsert_operation, record.create_operation

    record.batch(
        client,
        headers,
        [upsert(external_id, **required) for external_id in ("taken", "kept", "same")],
    )
    before = _events(client, headers)
    operations = [
        upsert("a", **required),
        create(**required, external_id="taken"),
        upsert("b", "x" * 256, **required),
        create(**required),
        upsert("kept", "Changed", **required),
        upsert("same", **required),
    ]

    response = record.batch(client, headers, operations)

    assert response.status_code == 200, response.text
    body = response.json()
    results = body["results"]
    assert [(r["status"], r["outcome"]) for r in results] == [
        (201, "created"),
        (409, "failed"),
        (422, "failed"),
        (201, "created"),
        (200, "updated"),
        (200, "unchanged"),
    ]
    assert body["summary"] == {"created": 2, "updated": 1, "unchanged": 1, "failed": 2}
    assert results[1]["error"]["code"] == "external_id_taken"
    assert [(e["field"], e["pointer"]) for e in results[2]["error"]["errors"]] == [
        (f"operations[2].data.{record.label}", f"/operations/2/data/{record.label}")
    ]
    assert all(r.get("data") is None for r in results[1:3])
    assert results[4]["data"][record.label] == "Changed"
    assert sorted(record.labels(client, headers)) == sorted(["L", "Changed", "L", "L", "L"])
    assert _events(client, headers)[len(before) :] == [
        (f"{record.noun}.created", "a"),
        (f"{record.noun}.created", None),
        (f"{record.noun}.updated", "kept"),
    ]


def test_an_atomic_batch_with_failures_writes_nothing_and_names_them(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)

    def upsert(external_id: str) -> dict[str, Any]:
        return record.upsert_operation(external_id, "A", **required)

    def create(external_id: str, label: str = "T") -> dict[str, Any]:
        return record.create_operation(label, **required, external_id=external_id)

    record.batch(client, headers, [upsert("taken"), upsert("also-taken")])
    before = _events(client, headers)

    conflicting = record.batch(
        client, headers, [upsert("a"), create("taken"), create("also-taken")], atomic=True
    )
    refused = record.batch(
        client, headers, [upsert("a"), create("b", "x" * 256), upsert("c")], atomic=True
    )

    assert conflicting.status_code == refused.status_code == 422
    assert conflicting.json()["code"] == refused.json()["code"] == "batch_rejected"
    named = [
        (f["index"], f["error"]["code"], f["error"]["status"])
        for f in conflicting.json()["failures"]
    ]
    taken = [(1, "external_id_taken", 409), (2, "external_id_taken", 409)]
    assert named == (taken if record.names_every_failure else taken[:1])
    # Invalid data is found before anything is written.
    assert [(f["index"], f["error"]["errors"][0]["field"]) for f in refused.json()["failures"]] == [
        (1, f"operations[1].data.{record.label}")
    ]
    assert record.labels(client, headers) == ["A", "A"]
    assert _events(client, headers) == before


def test_an_atomic_batch_without_failures_writes_everything(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)
    operations = [
        record.upsert_operation("a", **required),
        record.create_operation(**required),
        record.create_operation(**required, external_id="c"),
    ]

    response = record.batch(client, headers, operations, atomic=True)

    assert response.status_code == 200, response.text
    assert response.json()["summary"] == {"created": 3, "updated": 0, "unchanged": 0, "failed": 0}
    assert record.labels(client, headers) == ["L", "L", "L"]


def test_an_external_id_named_twice_in_a_batch_fails_the_later_operations(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)
    operations = [
        record.upsert_operation("a", "First", **required),
        record.upsert_operation("a", "Second", **required),
        record.create_operation("Third", **required, external_id="a"),
    ]

    results = record.batch(client, headers, operations).json()["results"]

    assert [r["outcome"] for r in results] == ["created", "failed", "failed"]
    assert [r["error"]["errors"][0]["field"] for r in results[1:]] == [
        "operations[1].external_id",
        "operations[2].data.external_id",
    ]
    assert {r["error"]["errors"][0]["code"] for r in results[1:]} == {"duplicate_item"}
    assert record.labels(client, headers) == ["First"]
