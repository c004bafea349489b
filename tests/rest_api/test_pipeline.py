"""GET /steps, /employees and /department: read-only views of the caller's department."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from dealbase.platform.pipeline.models import DEFAULT_STEPS
from tests.support import TenantWorld

API = "/api/v1/integration"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
EMPLOYEE_FIELDS = {"id", "name", "email", "department_id", "created_at", "updated_at"}


def get(
    client: TestClient,
    world: TenantWorld,
    path: str,
    *,
    index: int = 0,
    params: dict[str, str] | None = None,
) -> Any:
    return client.get(f"{API}{path}", params=params, headers=world.keys[index].headers)


def employ(database: Database, world: TenantWorld, names: list[str], index: int = 0) -> list[str]:
    department_id = world.departments[index].id
    return [
        str(create_employee(database, world.tenant.id, department_id, name, None).id)
        for name in names
    ]


def test_steps_are_the_departments_steps_in_order_with_positions_from_1(
    client: TestClient, world: TenantWorld
) -> None:
    response = get(client, world, "/steps")

    assert response.status_code == 200
    steps = response.json()["data"]
    assert all(set(step) == {"id", "name", "position"} for step in steps)
    assert [step["name"] for step in steps] == [name for name, _ in DEFAULT_STEPS]
    assert [step["position"] for step in steps] == list(range(1, len(DEFAULT_STEPS) + 1))
    expected = sorted(world.department.steps, key=lambda step: step.position)
    assert [step["id"] for step in steps] == [str(step.id) for step in expected]


def test_steps_are_those_of_the_callers_department_only(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)

    first = [step["id"] for step in get(client, world, "/steps", index=0).json()["data"]]
    second = [step["id"] for step in get(client, world, "/steps", index=1).json()["data"]]

    assert first == [str(step.id) for step in world.departments[0].steps]
    assert second == [str(step.id) for step in world.departments[1].steps]
    assert not set(first) & set(second)


def test_first_step_is_where_a_new_deal_starts(client: TestClient, world: TenantWorld) -> None:
    deal = client.post(f"{API}/deals", json={"name": "d"}, headers=world.key.headers).json()

    first = get(client, world, "/steps").json()["data"][0]

    assert first["position"] == 1 and deal["step_id"] == first["id"]


def test_employees_are_only_those_of_the_callers_department(
    client: TestClient, make_tenant: Callable[..., TenantWorld], database: Database
) -> None:
    world, stranger = make_tenant(departments=2), make_tenant()
    mine = employ(database, world, ["Ada", "Grace"])
    employ(database, world, ["Other department"], index=1)
    employ(database, stranger, ["Other tenant"])

    page = get(client, world, "/employees").json()

    assert page["next_cursor"] is None
    assert [employee["id"] for employee in page["data"]] == mine
    assert [employee["name"] for employee in page["data"]] == ["Ada", "Grace"]


def test_employee_has_its_fields_and_department(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    employee = create_employee(
        database, world.tenant.id, world.department.id, "Grace Hopper", "grace@example.com"
    )

    (body,) = get(client, world, "/employees").json()["data"]

    assert set(body) == EMPLOYEE_FIELDS
    assert (body["id"], body["name"], body["email"], body["department_id"]) == (
        str(employee.id), "Grace Hopper", "grace@example.com", str(world.department.id),
    )  # fmt: skip
    assert TIMESTAMP.match(body["created_at"]) and TIMESTAMP.match(body["updated_at"])


def test_department_without_employees_lists_none(client: TestClient, world: TenantWorld) -> None:
    assert get(client, world, "/employees").json() == {"data": [], "next_cursor": None}


def test_employees_paginate_with_limit_and_next_cursor_each_exactly_once(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    made = employ(database, world, [f"Employee {i}" for i in range(5)])
    pages: list[list[str]] = []
    params: dict[str, str] = {"limit": "2"}

    for _ in range(5):
        page = get(client, world, "/employees", params=params).json()
        pages.append([employee["id"] for employee in page["data"]])
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]

    assert [len(page) for page in pages] == [2, 2, 1]
    assert [employee_id for page in pages for employee_id in page] == made


def test_employees_last_full_page_has_no_next_cursor(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    employ(database, world, ["Ada", "Grace"])

    page = get(client, world, "/employees", params={"limit": "2"}).json()

    assert len(page["data"]) == 2 and page["next_cursor"] is None


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten"])
def test_employees_limit_out_of_range_is_422_naming_limit(
    client: TestClient, shared: TenantWorld, limit: str
) -> None:
    response = get(client, shared, "/employees", params={"limit": limit})

    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["limit"]


def test_department_is_the_callers_with_its_steps(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)

    response = get(client, world, "/department", index=1)

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(world.departments[1].id)
    assert body["name"] == "Department 2"
    assert body["steps"] == get(client, world, "/steps", index=1).json()["data"]
    assert {"id", "name", "steps"} <= set(body)
    assert TIMESTAMP.match(body["created_at"]) and TIMESTAMP.match(body["updated_at"])


@pytest.mark.parametrize("path", ["/steps", "/employees", "/department"])
def test_pipeline_reads_need_a_valid_key(
    client: TestClient, shared: TenantWorld, path: str
) -> None:
    headers = {**shared.key.headers, "X-Api-Key": shared.key.api_key + "x"}

    response = client.get(f"{API}{path}", headers=headers)

    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
