"""POST and GET /deals: the document's deal rules 1 and 2, and a failed request writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.platform.tables import customers, deal_customers, deals
from tests.rest_api.records_support import refused_fields
from tests.support import TenantWorld

DEALS = "/api/v1/integration/deals"
DEAL_FIELDS = {
    "id", "external_id", "name", "volume", "deal_origin", "employee_id", "employee_name", "step_id",
    "department_id", "note", "created_at", "updated_at", "customers",
}  # fmt: skip


def create(client: TestClient, world: TenantWorld, body: dict[str, Any]) -> Any:
    return client.post(DEALS, json=body, headers=world.key.headers)


def row_counts(database: Database, world: TenantWorld) -> tuple[int, int, int]:
    with database.unit_of_work(world.tenant.scope) as uow:
        deal_count, customer_count, link_count = (
            uow.connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (deals, customers, deal_customers)
        )
        return deal_count, customer_count, link_count


def test_create_returns_201_with_the_documented_fields_and_location(
    client: TestClient, world: TenantWorld
) -> None:
    response = create(client, world, {"name": "Engines", "volume": 1200, "deal_origin": "fair"})

    assert response.status_code == 201
    body = response.json()
    assert set(body) == DEAL_FIELDS
    assert response.headers["location"] == f"{DEALS}/{body['id']}"
    assert (body["name"], body["volume"], body["deal_origin"], body["note"]) == (
        "Engines", 1200, "fair", None,
    )  # fmt: skip
    assert client.get(response.headers["location"], headers=world.key.headers).json() == body


def test_rule_1_one_customer_per_element_returned_in_request_order(
    client: TestClient, world: TenantWorld
) -> None:
    names = ["Zed", "Abel", "Moss", "Abel"]
    body = create(
        client, world, {"name": "d", "customers": [{"last_name": n} for n in names]}
    ).json()

    assert [c["last_name"] for c in body["customers"]] == names
    assert len({c["id"] for c in body["customers"]}) == len(names)
    for customer in body["customers"]:
        assert customer["tenant_id"] == str(world.tenant.id)
        read = client.get(
            f"/api/v1/integration/customers/{customer['id']}", headers=world.key.headers
        )
        assert read.json() == customer
    again = client.get(f"{DEALS}/{body['id']}", headers=world.key.headers).json()
    assert [c["id"] for c in again["customers"]] == [c["id"] for c in body["customers"]]


def test_deal_customers_carry_their_other_fields(client: TestClient, world: TenantWorld) -> None:
    sent = {"last_name": "Lovelace", "first_name": "Ada", "email": "ada@example.com"}

    (customer,) = create(client, world, {"name": "d", "customers": [sent]}).json()["customers"]

    assert {k: customer[k] for k in sent} == sent
    assert customer["phone_1"] is None


def test_rule_2_a_new_deal_is_unassigned(client: TestClient, world: TenantWorld) -> None:
    body = create(client, world, {"name": "d"}).json()

    assert body["employee_id"] is None and body["employee_name"] is None


def test_new_deal_starts_in_the_first_step_of_the_callers_department(
    client: TestClient, world: TenantWorld
) -> None:
    body = create(client, world, {"name": "d"}).json()

    first_step = min(world.department.steps, key=lambda step: step.position)
    assert body["step_id"] == str(first_step.id)
    assert body["department_id"] == str(world.department.id)
    assert body["customers"] == []


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "name", "missing"),
        ({"name": ""}, "name", "blank"),
        ({"name": "d", "volume": -1}, "volume", "out_of_range"),
        ({"name": "d", "volume": 2**63}, "volume", "out_of_range"),
        ({"name": "d", "volume": "100"}, "volume", "wrong_type"),
        ({"name": "d", "volume": 10.5}, "volume", "wrong_type"),
        ({"name": "d", "volume": 10.0}, "volume", "wrong_type"),
        ({"name": "d", "customers": {"last_name": "x"}}, "customers", "wrong_type"),
        ({"name": "d", "customers": [{}]}, "customers[0].last_name", "missing"),
        ({"name": "d", "customers": [{"last_name": "x"}] * 101}, "customers", "too_many_items"),
        ({"name": "d", "step_id": "x"}, "step_id", "unknown_field"),
    ],
)
def test_bad_deal_field_is_422_naming_the_field(
    client: TestClient, world: TenantWorld, body: dict[str, Any], field: str, code: str
) -> None:
    assert refused_fields(create(client, world, body)) == [(field, code)]


def test_largest_volume_and_a_hundred_customers_are_accepted(
    client: TestClient, world: TenantWorld
) -> None:
    body = {
        "name": "d",
        "volume": 2**63 - 1,
        "customers": [{"last_name": f"c{i}"} for i in range(100)],
    }

    response = create(client, world, body)

    assert response.status_code == 201
    assert response.json()["volume"] == 2**63 - 1
    assert len(response.json()["customers"]) == 100


def test_deal_whose_third_customer_is_invalid_writes_nothing(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    before = row_counts(database, world)
    customers_sent: list[dict[str, Any]] = [
        {"last_name": "one"}, {"last_name": "two"}, {"last_name": ""}, {"last_name": "four"},
    ]  # fmt: skip

    response = create(client, world, {"name": "d", "customers": customers_sent})

    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["customers[2].last_name"]
    assert row_counts(database, world) == before
