"""Two tenants of two departments each: no key reaches another tenant's or department's rows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from dealbase.db.database import Database
from tests.support import Credentials, TenantWorld

API = "/api/v1/integration"


@pytest.fixture
def two_tenants(make_tenant: Callable[..., TenantWorld]) -> tuple[TenantWorld, TenantWorld]:
    return make_tenant(departments=2), make_tenant(departments=2)


def every_key(worlds: tuple[TenantWorld, TenantWorld]) -> list[Credentials]:
    return [key for world in worlds for key in world.keys]


def test_a_row_is_readable_only_with_a_key_of_its_own_department(
    client: TestClient, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    owner = two_tenants[0].keys[0]
    customer = client.post(
        f"{API}/customers", json={"last_name": "x"}, headers=owner.headers
    ).json()
    deal = client.post(f"{API}/deals", json={"name": "d"}, headers=owner.headers).json()
    unknown = client.get(f"{API}/customers/{deal['id']}", headers=owner.headers)

    for key in every_key(two_tenants):
        for path in (f"{API}/customers/{customer['id']}", f"{API}/deals/{deal['id']}"):
            response = client.get(path, headers=key.headers)
            if key == owner:
                assert response.status_code == 200
            else:
                # A foreign id answers exactly like an unknown one (bar the request id).
                assert response.status_code == 404
                assert {**response.json(), "request_id": ""} == {
                    **unknown.json(),
                    "request_id": "",
                    "detail": response.json()["detail"],
                }
                assert response.json()["code"] == "not_found"


def test_writes_land_in_the_keys_department_and_tenant_schema(
    client: TestClient, database: Database, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    first, second = two_tenants
    key = first.keys[1]

    deal = client.post(
        f"{API}/deals", json={"name": "d", "customers": [{"last_name": "x"}]}, headers=key.headers
    ).json()

    assert deal["department_id"] == str(key.department_id)
    with database.control() as connection:
        located = connection.execute(
            text(
                "SELECT table_schema FROM information_schema.tables"
                " WHERE table_name = 'deals' AND table_schema IN (:a, :b)"
            ),
            {"a": first.tenant.schema, "b": second.tenant.schema},
        ).scalars()
        assert sorted(located) == sorted([first.tenant.schema, second.tenant.schema])
        in_first = connection.execute(
            text(f'SELECT department_id::text FROM "{first.tenant.schema}".deals WHERE id = :id'),
            {"id": deal["id"]},
        ).scalar_one()
        in_second = connection.execute(
            text(f'SELECT count(*) FROM "{second.tenant.schema}".deals WHERE id = :id'),
            {"id": deal["id"]},
        ).scalar_one()
        customer_home = connection.execute(
            text(f'SELECT count(*) FROM "{first.tenant.schema}".customers WHERE id = :id'),
            {"id": deal["customers"][0]["id"]},
        ).scalar_one()
    assert in_first == str(key.department_id)
    assert in_second == 0
    assert customer_home == 1


def test_a_key_cannot_name_another_department(
    client: TestClient, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    first, second = two_tenants
    key = first.keys[0]
    for other in (first.keys[1].department_id, second.keys[0].department_id):
        response = client.post(
            f"{API}/customers",
            json={"last_name": "x"},
            headers={"X-Api-Key": key.api_key, "X-Department-Id": str(other)},
        )
        assert response.status_code == 403
        assert response.json()["code"] == "forbidden"


def test_every_id_taking_route_answers_404_to_other_departments_and_tenants(
    client: TestClient, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    owner = two_tenants[0].keys[0]
    deal = client.post(
        f"{API}/deals", json={"name": "d", "customers": [{"last_name": "x"}]}, headers=owner.headers
    ).json()
    customer_id = deal["customers"][0]["id"]
    activity = client.post(
        f"{API}/activities",
        json={"type": "call", "customer_id": customer_id},
        headers=owner.headers,
    ).json()
    owned = [f"/customers/{customer_id}", f"/deals/{deal['id']}", f"/activities/{activity['id']}"]
    before = {path: client.get(f"{API}{path}", headers=owner.headers).json() for path in owned}

    for key in every_key(two_tenants):
        if key == owner:
            continue
        own_customer = client.post(
            f"{API}/customers", json={"last_name": "o"}, headers=key.headers
        ).json()
        attempts = [
            *(("GET", path, None) for path in owned),
            *(("PATCH", path, {}) for path in owned),
            *(("DELETE", path, None) for path in owned),
            ("POST", f"/deals/{deal['id']}/customers", {"customer_id": own_customer["id"]}),
            ("DELETE", f"/deals/{deal['id']}/customers/{customer_id}", None),
        ]
        for method, path, body in attempts:
            response = client.request(method, f"{API}{path}", json=body, headers=key.headers)
            assert response.status_code == 404, (method, path, key.department_id)
            assert response.json()["code"] == "not_found"

    after = {path: client.get(f"{API}{path}", headers=owner.headers).json() for path in owned}
    assert after == before


def test_lists_show_only_the_callers_department(
    client: TestClient, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    created: dict[Credentials, str] = {}
    for key in every_key(two_tenants):
        created[key] = client.post(
            f"{API}/deals",
            json={"name": "d", "customers": [{"last_name": "x"}]},
            headers=key.headers,
        ).json()["id"]

    for key, deal_id in created.items():
        for path in ("/deals", "/customers", "/activities", "/employees"):
            response = client.get(f"{API}{path}", headers=key.headers)
            assert response.status_code == 200
            if path == "/deals":
                assert [d["id"] for d in response.json()["data"]] == [deal_id]
        steps = client.get(f"{API}/steps", headers=key.headers).json()["data"]
        department = client.get(f"{API}/department", headers=key.headers).json()
        assert department["id"] == str(key.department_id)
        assert [s["id"] for s in steps] == [s["id"] for s in department["steps"]]
