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


@pytest.fixture
def syncing(client: TestClient, world: TenantWorld, record: SyncedApi) -> SyncingKey:
    """Each record's routes as the key of ``world``'s department calls them."""
    return SyncingKey(client, record, world.key.headers, record.required(client, world.key.headers))


@pytest.mark.parametrize(
    ("external_id", "condition", "status"),
    [
        ("sync-1", {"If-Match": '"7"'}, 412),
        ("sync-2", {"If-Match": "*"}, 412),
        ("sync-1", {"If-Match": '"1"'}, 200),
        ("sync-1", {"If-None-Match": '"1"'}, 412),
        ("sync-1", {"If-None-Match": '"5", "6"'}, 200),
        ("sync-2", {"If-None-Match": '"1"'}, 201),
    ],
    ids=[
        "if-match-another-version",
        "if-match-any-where-none-is",
        "if-match-its-version",
        "if-none-match-its-version",
        "if-none-match-other-versions",
        "if-none-match-where-none-is",
    ],
)
def test_a_conditional_put_is_written_only_where_its_condition_holds(
    syncing: SyncingKey, external_id: str, condition: dict[str, str], status: int
) -> None:
    """After sync-1 was put once (version 1): If-Match needs the record at one of its versions
    (any, for *); If-None-Match refuses it at one of them."""
    syncing.put("sync-1", "A")

    response = syncing.put(external_id, "B", condition)

    assert response.status_code == status
    if status == 412:
        assert response.json()["code"] == "precondition_failed"
        assert syncing.labels(external_id) == (["A"] if external_id == "sync-1" else [])
    else:
        assert response.json()[syncing.record.label] == "B"


def test_if_none_match_star_only_creates(syncing: SyncingKey) -> None:
    created = syncing.put("sync-1", "A", {"If-None-Match": "*"})
    again = syncing.put("sync-1", "B", {"If-None-Match": "*"})

    assert (created.status_code, again.status_code) == (201, 412)
    assert again.json()["code"] == "precondition_failed"
    assert syncing.labels() == ["A"]


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
    syncing: SyncingKey,
) -> None:
    record, upsert, create = syncing.record, syncing.upsert, syncing.create
    own = record.own_failures
    syncing.batch([upsert(external_id) for external_id in ("taken", "kept", "same")])
    before = syncing.events()
    operations = [
        upsert("a"),
        create(external_id="taken"),
        upsert("b", "x" * 256),
        create(),
        upsert("kept", "Changed"),
        upsert("same"),
        # Then an upsert failed by each of the record's own rules.
        *(upsert(f"own-{n}", **fields) for n, (fields, _, _) in enumerate(own)),
    ]

    response = syncing.batch(operations)

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
        *[(422, "failed")] * len(own),
    ]
    assert body["summary"] == {"created": 2, "updated": 1, "unchanged": 1, "failed": 2 + len(own)}
    assert results[1]["error"]["code"] == "external_id_taken"
    named = [(record.label, "too_long"), *((field, code) for _, field, code in own)]
    for index, (field, code) in zip([2, *range(6, 6 + len(own))], named, strict=True):
        assert [
            (e["field"], e["code"], e["pointer"]) for e in results[index]["error"]["errors"]
        ] == [(f"operations[{index}].data.{field}", code, f"/operations/{index}/data/{field}")], (
            field
        )
    assert all(r.get("data") is None for r in [*results[1:3], *results[6:]])
    assert results[4]["data"][record.label] == "Changed"
    assert sorted(syncing.labels()) == sorted(["L", "Changed", "L", "L", "L"])
    assert syncing.events()[len(before) :] == [
        (f"{record.noun}.created", "a"),
        (f"{record.noun}.created", None),
        (f"{record.noun}.updated", "kept"),
    ]


def test_an_atomic_batch_with_failures_writes_nothing_and_names_them(
    syncing: SyncingKey,
) -> None:
    record, upsert, create = syncing.record, syncing.upsert, syncing.create
    syncing.batch([upsert("taken", "A"), upsert("also-taken", "A")])
    before = syncing.events()

    conflicting = syncing.batch(
        [upsert("a", "A"), create("T", external_id="taken"), create("T", external_id="also-taken")],
        atomic=True,
    )
    refused = syncing.batch(
        [upsert("a", "A"), create("x" * 256, external_id="b"), upsert("c", "A")], atomic=True
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
    assert syncing.labels() == ["A", "A"]
    assert syncing.events() == before


def test_an_atomic_batch_without_failures_writes_everything(syncing: SyncingKey) -> None:
    operations = [syncing.upsert("a"), syncing.create(), syncing.create(external_id="c")]

    response = syncing.batch(operations, atomic=True)

    assert response.status_code == 200, response.text
    assert response.json()["summary"] == {"created": 3, "updated": 0, "unchanged": 0, "failed": 0}
    assert syncing.labels() == ["L", "L", "L"]


def test_an_external_id_named_twice_in_a_batch_fails_the_later_operations(
    syncing: SyncingKey,
) -> None:
    operations = [
        syncing.upsert("a", "First"),
        syncing.upsert("a", "Second"),
        syncing.create("Third", external_id="a"),
    ]

    results = syncing.batch(operations).json()["results"]

    assert [r["outcome"] for r in results] == ["created", "failed", "failed"]
    assert [r["error"]["errors"][0]["field"] for r in results[1:]] == [
        "operations[1].external_id",
        "operations[2].data.external_id",
    ]
    assert {r["error"]["errors"][0]["code"] for r in results[1:]} == {"duplicate_item"}
    assert syncing.labels() == ["First"]
