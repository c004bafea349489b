"""PUT /deals/by-external-id/{external_id} and POST /deals/batch: a sync's deals, created or
changed by the client's own ids, one at a time or up to a thousand per request; and the
references a deal's write may name, by PUT or PATCH."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.rest_api.records_support import API, RECORDS, refused_fields
from tests.rest_api.test_events import all_events
from tests.support import TenantWorld

DEAL = RECORDS["deals"]
DEALS = f"{API}/deals"
upsert, create = DEAL.upsert_operation, DEAL.create_operation


def put_placed(
    client: TestClient, world: TenantWorld, step_id: uuid.UUID, employee_id: uuid.UUID
) -> Any:
    """A PUT of the deal order-1 that names its step and its employee."""
    body = {"name": "Engines", "step_id": str(step_id), "employee_id": str(employee_id)}
    return DEAL.put(client, world.key.headers, "order-1", body)


def placement(deal: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """Where a deal stands: its step, and its employee's id and name."""
    return deal["step_id"], deal["employee_id"], deal["employee_name"]


def test_an_upsert_creates_the_deal_then_changes_only_the_fields_it_gives(
    client: TestClient, world: TenantWorld
) -> None:
    created = DEAL.put(
        client, world.key.headers, "order-1", {"name": "Engines", "volume": 10, "note": "n"}
    )

    assert created.status_code == 201, created.text
    first = created.json()
    assert created.headers["location"] == f"{DEALS}/{first['id']}"
    assert created.headers["etag"] == '"1"'
    assert (first["external_id"], first["name"], first["volume"], first["note"]) == (
        "order-1", "Engines", 10, "n",
    )  # fmt: skip
    assert first["step_id"] == str(world.department.steps[0].id)
    assert (first["employee_id"], first["customers"]) == (None, [])

    changed = DEAL.put(
        client, world.key.headers, "order-1", {"name": "Engines", "volume": 20, "deal_origin": "x"}
    )

    assert changed.status_code == 200, changed.text
    assert changed.headers["etag"] == '"2"'
    body = changed.json()
    assert body["id"] == first["id"]
    assert (body["volume"], body["deal_origin"], body["note"]) == (20, "x", "n")
    assert body["created_at"] == first["created_at"]
    assert body["updated_at"] > first["updated_at"]
    assert client.get(created.headers["location"], headers=world.key.headers).json() == body
    events = all_events(client, world)
    assert [event["type"] for event in events] == ["deal.created", "deal.updated"]
    assert events[1]["changed_fields"] == ["volume", "deal_origin"]
    assert events[1]["previous"] == {"volume": 10, "deal_origin": None}
    assert events[1]["data"] == body


def test_an_upsert_that_changes_nothing_writes_nothing(
    client: TestClient, world: TenantWorld
) -> None:
    first = DEAL.put(client, world.key.headers, "order-1", {"name": "Engines", "volume": 10})
    step_id = first.json()["step_id"]

    again = DEAL.put(client, world.key.headers, "order-1", {"name": "Engines", "volume": 10})
    subset = DEAL.put(client, world.key.headers, "order-1", {"name": "Engines", "step_id": step_id})

    for response in (again, subset):
        assert response.status_code == 200
        assert response.json() == first.json()
        assert response.headers["etag"] == '"1"'
    assert [event["type"] for event in all_events(client, world)] == ["deal.created"]


def test_an_upsert_moves_and_assigns_with_the_events_a_patch_makes(
    client: TestClient, world: TenantWorld, employee_of: Callable[[TenantWorld, int], uuid.UUID]
) -> None:
    first_step, last_step = world.department.steps[0], world.department.steps[-1]
    employee = employee_of(world, 0)
    DEAL.put(client, world.key.headers, "order-1", {"name": "Engines"})

    moved = put_placed(client, world, last_step.id, employee)

    assert moved.status_code == 200, moved.text
    body = moved.json()
    assert placement(body) == (str(last_step.id), str(employee), "Eve")
    events = all_events(client, world)
    assert [event["type"] for event in events] == [
        "deal.created",
        "deal.updated",
        "deal.step_changed",
        "deal.assigned",
    ]
    assert events[2]["previous"] == {"step_id": str(first_step.id)}
    assert events[3]["previous"] == {"employee_id": None}

    unassigned = DEAL.put(
        client, world.key.headers, "order-1", {"name": "Engines", "employee_id": None}
    ).json()

    assert (unassigned["employee_id"], unassigned["step_id"]) == (None, str(last_step.id))


def test_a_new_deal_starts_in_the_step_and_with_the_employee_the_upsert_names(
    client: TestClient, world: TenantWorld, employee_of: Callable[[TenantWorld, int], uuid.UUID]
) -> None:
    step = world.department.steps[-1]
    employee = employee_of(world, 0)

    response = put_placed(client, world, step.id, employee)

    assert response.status_code == 201, response.text
    body = response.json()
    assert placement(body) == (str(step.id), str(employee), "Eve")
    assert client.get(response.headers["location"], headers=world.key.headers).json() == body
    assert [event["type"] for event in all_events(client, world)] == ["deal.created"]


@pytest.mark.parametrize("write", ["PATCH", "PUT of a new deal", "PUT of an existing deal"])
def test_a_step_or_employee_of_another_department_is_422_naming_the_field(
    client: TestClient,
    make_tenant: Callable[..., TenantWorld],
    employee_of: Callable[[TenantWorld, int], uuid.UUID],
    write: str,
) -> None:
    world = make_tenant(departments=2)
    headers = world.key.headers
    existing = DEAL.put(client, headers, "existing", {"name": "D"}).json()
    references = [
        ("step_id", world.departments[1].steps[0].id),
        ("employee_id", employee_of(world, 1)),
        ("step_id", uuid.uuid4()),
        ("employee_id", uuid.uuid4()),
    ]

    for field, value in references:
        if write == "PATCH":
            path = f"{DEALS}/{existing['id']}"
            response = client.patch(path, json={field: str(value)}, headers=headers)
        else:
            external_id = "new" if write == "PUT of a new deal" else "existing"
            response = DEAL.put(client, headers, external_id, {"name": "D", field: str(value)})
        assert refused_fields(response) == [(field, "not_found")], field

    assert DEAL.listed(client, headers) == [existing]


def test_an_upsert_body_has_no_customers_and_keeps_the_linked_ones(
    client: TestClient, world: TenantWorld
) -> None:
    deal = DEAL.put(client, world.key.headers, "order-1", {"name": "D"}).json()
    customer = client.put(
        f"{API}/customers/by-external-id/c-1", json={"last_name": "Ada"}, headers=world.key.headers
    ).json()
    linked = client.post(
        f"{DEALS}/{deal['id']}/customers",
        json={"customer_id": customer["id"]},
        headers=world.key.headers,
    )
    assert linked.status_code == 200, linked.text

    with_customers = DEAL.put(client, world.key.headers, "order-1", {"name": "D", "customers": []})
    renamed = DEAL.put(client, world.key.headers, "order-1", {"name": "E"})

    assert with_customers.status_code == 422
    assert [(e["field"], e["code"]) for e in with_customers.json()["errors"]] == [
        ("customers", "unknown_field")
    ]
    assert renamed.status_code == 200
    assert [c["id"] for c in renamed.json()["customers"]] == [customer["id"]]


def test_step_id_may_be_omitted_but_not_null(client: TestClient, world: TenantWorld) -> None:
    existing = DEAL.put(client, world.key.headers, "existing", {"name": "D"}).json()

    for external_id in ("new", "existing"):
        response = DEAL.put(client, world.key.headers, external_id, {"name": "D", "step_id": None})
        assert response.status_code == 422, external_id
        assert [(e["field"], e["code"]) for e in response.json()["errors"]] == [
            ("step_id", "cannot_clear")
        ]
    assert DEAL.listed(client, world.key.headers) == [existing]


def test_creating_with_a_taken_external_id_is_a_conflict_and_writes_nothing(
    client: TestClient, world: TenantWorld
) -> None:
    DEAL.put(client, world.key.headers, "order-1", {"name": "First"})
    client.put(
        f"{API}/customers/by-external-id/c-1", json={"last_name": "A"}, headers=world.key.headers
    )

    taken = client.post(
        DEALS,
        json={"name": "Twin", "external_id": "order-1", "customers": [{"last_name": "B"}]},
        headers=world.key.headers,
    )
    customer_taken = client.post(
        DEALS,
        json={"name": "New", "customers": [{"last_name": "B", "external_id": "c-1"}]},
        headers=world.key.headers,
    )

    both_taken = client.post(
        DEALS,
        json={
            "name": "Twin",
            "external_id": "order-1",
            "customers": [{"last_name": "B", "external_id": "c-1"}],
        },
        headers=world.key.headers,
    )

    for response in (taken, customer_taken, both_taken):
        assert response.status_code == 409, response.text
        assert response.json()["code"] == "external_id_taken"
    # The deal's own external id is the one named when both are taken.
    assert "Another deal" in both_taken.json()["detail"]
    assert "Another customer" in customer_taken.json()["detail"]
    assert [deal["name"] for deal in DEAL.listed(client, world.key.headers)] == ["First"]
    customers = client.get(f"{API}/customers", headers=world.key.headers).json()["data"]
    assert [customer["last_name"] for customer in customers] == ["A"]


def test_a_patch_to_a_taken_external_id_is_a_conflict(
    client: TestClient, world: TenantWorld
) -> None:
    DEAL.put(client, world.key.headers, "order-1", {"name": "First"})
    other = DEAL.put(client, world.key.headers, "order-2", {"name": "Second"}).json()

    response = client.patch(
        f"{DEALS}/{other['id']}", json={"external_id": "order-1"}, headers=world.key.headers
    )

    assert response.status_code == 409
    assert response.json()["code"] == "external_id_taken"


def test_a_batch_creates_deals_with_new_customers_and_undoes_a_failed_ones(
    client: TestClient, world: TenantWorld
) -> None:
    """What every record's batch answers alike (a taken id, a failed rule, the others written)
    is in test_record_sync; a deal's own rules fail there too."""
    headers = world.key.headers
    DEAL.batch(client, headers, [upsert("taken"), upsert("kept", volume=1)])
    operations = [
        create(external_id="c", customers=[{"last_name": "Ada"}]),
        create(external_id="taken", customers=[{"last_name": "Ghost"}]),
        upsert("kept", volume=2),
    ]

    response = DEAL.batch(client, headers, operations)

    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["outcome"] for r in results] == ["created", "failed", "updated"]
    assert [c["last_name"] for c in results[0]["data"]["customers"]] == ["Ada"]
    assert results[2]["data"]["volume"] == 2
    customers = client.get(f"{API}/customers", headers=headers).json()["data"]
    assert [customer["last_name"] for customer in customers] == ["Ada"]
    # The failed operation's writes, and their events, were undone with its savepoint.
    events = all_events(client, world)
    assert [(e["type"], e["data"].get("external_id")) for e in events[2:]] == [
        ("customer.created", None),
        ("deal.created", "c"),
        ("deal.updated", "kept"),
    ]


def test_an_atomic_batch_that_fails_undoes_the_customers_its_deals_made(
    client: TestClient, world: TenantWorld
) -> None:
    DEAL.batch(client, world.key.headers, [upsert("taken")])
    invalid = [upsert("a"), create(volume=-1), upsert("b")]
    failing = [upsert("a"), create(customers=[{"last_name": "Ada"}]), create(external_id="taken")]

    invalid_response = DEAL.batch(client, world.key.headers, invalid, atomic=True)
    failing_response = DEAL.batch(client, world.key.headers, failing, atomic=True)

    assert invalid_response.status_code == 422
    assert invalid_response.json()["code"] == "batch_rejected"
    assert [
        (f["index"], f["error"]["errors"][0]["field"]) for f in invalid_response.json()["failures"]
    ] == [(1, "operations[1].data.volume")]
    assert failing_response.status_code == 422
    body = failing_response.json()
    assert body["code"] == "batch_rejected"
    assert [(f["index"], f["error"]["code"], f["error"]["status"]) for f in body["failures"]] == [
        (2, "external_id_taken", 409)
    ]
    assert [deal["external_id"] for deal in DEAL.listed(client, world.key.headers)] == ["taken"]
    assert client.get(f"{API}/customers", headers=world.key.headers).json()["data"] == []
    assert [event["type"] for event in all_events(client, world)] == ["deal.created"]


def test_the_batch_document_gives_each_operation_its_own_body(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    items = schemas["DealBatch"]["properties"]["operations"]["items"]

    assert items["discriminator"]["propertyName"] == "op"
    assert items["discriminator"]["mapping"] == {
        "create": "#/components/schemas/DealCreateOperation",
        "upsert": "#/components/schemas/DealUpsertOperation",
    }
    create_data = schemas["DealCreateOperation"]["properties"]["data"]
    upsert_data = schemas["DealUpsertOperation"]["properties"]["data"]
    assert create_data["description"].startswith("A DealCreate ")
    assert upsert_data["description"].startswith("A DealUpsert ")
    assert "customers" in schemas["DealCreate"]["properties"]
    assert "customers" not in schemas["DealUpsert"]["properties"]
    assert schemas["DealUpsertOperation"]["required"] == ["op", "external_id", "data"]
