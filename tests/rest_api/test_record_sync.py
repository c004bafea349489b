"""PUT /{records}/by-external-id/{external_id} and POST /{records}/batch as every synced record
answers them (customers, deals, activities): the conditional headers of an upsert, a create's
taken external id, the body's external id against the path's, and an external id's reach (one
department of one tenant). What is particular to one record is in its own module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.platform.batches.models import MAX_OPERATIONS
from dealbase.tenancy.database.connections import Database
from tests.support import TenantWorld

API = "/api/v1/integration"


def _a_customer(client: TestClient, headers: dict[str, str]) -> str:
    response = client.post(f"{API}/customers", json={"last_name": "Lovelace"}, headers=headers)
    assert response.status_code == 201, response.text
    customer: str = response.json()["id"]
    return customer


@dataclass(frozen=True)
class SyncedApi:
    """A synced record as its routes take it: ``label`` is a text field its tests write and
    read back; ``required`` gives the rest of a valid body in the department of the headers."""

    plural: str
    label: str
    required: Callable[[TestClient, dict[str, str]], dict[str, Any]] = lambda client, headers: {}

    def body(self, required: dict[str, Any], label: str, **fields: Any) -> dict[str, Any]:
        return {**required, self.label: label, **fields}

    def put(
        self,
        client: TestClient,
        headers: dict[str, str],
        external_id: str,
        body: dict[str, Any],
        **conditions: str,
    ) -> Any:
        return client.put(
            f"{API}/{self.plural}/by-external-id/{external_id}",
            json=body,
            headers={**headers, **conditions},
        )

    def labels(
        self, client: TestClient, headers: dict[str, str], external_id: str | None = None
    ) -> list[str]:
        params = {"limit": 100} if external_id is None else {"external_id": external_id}
        page = client.get(f"{API}/{self.plural}", params=params, headers=headers).json()
        return [item[self.label] for item in page["data"]]


RECORDS = {
    "customers": SyncedApi("customers", "last_name"),
    "deals": SyncedApi("deals", "name"),
    "activities": SyncedApi(
        "activities",
        "subject",
        lambda client, headers: {"type": "call", "customer_id": _a_customer(client, headers)},
    ),
}


@pytest.fixture(params=sorted(RECORDS))
def record(request: pytest.FixtureRequest) -> SyncedApi:
    return RECORDS[request.param]


def test_if_match_needs_the_record_at_that_version(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)
    record.put(client, headers, "sync-1", record.body(required, "A"))

    changed = record.body(required, "B")
    stale = record.put(client, headers, "sync-1", changed, **{"If-Match": '"7"'})
    missing = record.put(client, headers, "sync-2", changed, **{"If-Match": "*"})
    current = record.put(client, headers, "sync-1", changed, **{"If-Match": '"1"'})

    assert (stale.status_code, missing.status_code, current.status_code) == (412, 412, 200)
    assert stale.json()["code"] == missing.json()["code"] == "precondition_failed"
    assert current.json()[record.label] == "B"
    assert record.labels(client, headers, "sync-2") == []


def test_if_none_match_star_only_creates(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)

    created = record.put(
        client, headers, "sync-1", record.body(required, "A"), **{"If-None-Match": "*"}
    )
    again = record.put(
        client, headers, "sync-1", record.body(required, "B"), **{"If-None-Match": "*"}
    )

    assert (created.status_code, again.status_code) == (201, 412)
    assert again.json()["code"] == "precondition_failed"
    assert record.labels(client, headers) == ["A"]


def test_if_none_match_with_etags_refuses_only_at_those_versions(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)
    record.put(client, headers, "sync-1", record.body(required, "A"))

    changed = record.body(required, "B")
    at_it = record.put(client, headers, "sync-1", changed, **{"If-None-Match": '"1"'})
    elsewhere = record.put(client, headers, "sync-1", changed, **{"If-None-Match": '"5", "6"'})
    new = record.put(
        client, headers, "sync-2", record.body(required, "C"), **{"If-None-Match": '"1"'}
    )

    assert (at_it.status_code, elsewhere.status_code, new.status_code) == (412, 200, 201)
    assert elsewhere.json()[record.label] == "B"


def test_creating_with_a_taken_external_id_is_a_conflict_and_writes_nothing(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)
    record.put(client, headers, "sync-1", record.body(required, "First"))

    response = client.post(
        f"{API}/{record.plural}",
        json=record.body(required, "Twin", external_id="sync-1"),
        headers=headers,
    )

    assert response.status_code == 409
    assert response.json()["code"] == "external_id_taken"
    assert record.labels(client, headers) == ["First"]


def test_the_body_may_repeat_the_paths_external_id_but_not_contradict_it(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    required = record.required(client, headers)

    same = record.put(client, headers, "sync-1", record.body(required, "A", external_id="sync-1"))
    other = record.put(client, headers, "sync-2", record.body(required, "A", external_id="sync-3"))

    assert same.status_code == 201
    assert other.status_code == 422
    assert [(e["field"], e["code"]) for e in other.json()["errors"]] == [
        ("external_id", "mismatch")
    ]


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
        response = client.post(
            f"{API}/{plural}/batch", json={"operations": operations}, headers=headers
        )
        assert response.status_code == 200, response.text
        return response.json()

    def upsert(external_id: str, label: str = "L") -> dict[str, Any]:
        return {"op": "upsert", "external_id": external_id, "data": record.body(required, label)}

    counts = {}
    for size in (10, MAX_OPERATIONS - 2):
        send([upsert(f"{size}-{n}") for n in range(size)])
        changed = [upsert(f"{size}-{n}", "X" if n % 2 else "L") for n in range(size)]
        tenant_statements.count = 0
        create = {"op": "create", "data": record.body(required, "L")}
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
