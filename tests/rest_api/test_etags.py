"""Optimistic concurrency: ETag on reads and writes, If-Match that no longer matches is 412."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support import TenantWorld

API = "/api/v1/integration"


@pytest.fixture
def resources(client: TestClient, world: TenantWorld) -> dict[str, dict[str, Any]]:
    headers = world.key.headers
    customer = client.post(f"{API}/customers", json={"last_name": "A"}, headers=headers).json()
    deal = client.post(f"{API}/deals", json={"name": "D"}, headers=headers).json()
    activity = client.post(
        f"{API}/activities", json={"type": "call", "customer_id": customer["id"]}, headers=headers
    ).json()
    return {
        f"/customers/{customer['id']}": {"first_name": "Ada"},
        f"/deals/{deal['id']}": {"volume": 5},
        f"/activities/{activity['id']}": {"subject": "hi"},
    }


def test_get_and_patch_return_an_etag_that_changes_with_each_change(
    client: TestClient, world: TenantWorld, resources: dict[str, dict[str, Any]]
) -> None:
    for path, change in resources.items():
        read = client.get(f"{API}{path}", headers=world.key.headers)
        changed = client.patch(
            f"{API}{path}",
            json=change,
            headers={**world.key.headers, "If-Match": read.headers["etag"]},
        )
        assert changed.status_code == 200, changed.text
        assert changed.headers["etag"] != read.headers["etag"]
        assert (
            client.get(f"{API}{path}", headers=world.key.headers).headers["etag"]
            == changed.headers["etag"]
        )


def test_patch_with_a_stale_etag_is_412_and_changes_nothing(
    client: TestClient, world: TenantWorld, resources: dict[str, dict[str, Any]]
) -> None:
    for path, change in resources.items():
        stale = client.get(f"{API}{path}", headers=world.key.headers).headers["etag"]
        client.patch(f"{API}{path}", json=change, headers=world.key.headers)
        before = client.get(f"{API}{path}", headers=world.key.headers).json()

        refused = client.patch(
            f"{API}{path}", json={}, headers={**world.key.headers, "If-Match": stale}
        )

        assert refused.status_code == 412
        assert refused.json()["code"] == "precondition_failed"
        assert client.get(f"{API}{path}", headers=world.key.headers).json() == before


def test_delete_with_a_stale_etag_is_412_and_keeps_the_row(
    client: TestClient, world: TenantWorld, resources: dict[str, dict[str, Any]]
) -> None:
    for path in resources:
        response = client.delete(f"{API}{path}", headers={**world.key.headers, "If-Match": '"999"'})
        assert response.status_code == 412
        assert client.get(f"{API}{path}", headers=world.key.headers).status_code == 200


@pytest.mark.parametrize(
    ("if_match", "status"),
    [("*", 200), ('"1", "7"', 200), ('W/"1"', 412), ("garbage", 412), ('"7"', 412)],
)
def test_if_match_forms(client: TestClient, world: TenantWorld, if_match: str, status: int) -> None:
    customer = client.post(f"{API}/customers", json={"last_name": "A"}, headers=world.key.headers)
    assert customer.headers["etag"] == '"1"'

    response = client.patch(
        customer.headers["location"],
        json={"city": "X"},
        headers={**world.key.headers, "If-Match": if_match},
    )

    assert response.status_code == status


def test_if_match_on_an_unknown_id_is_404_not_412(client: TestClient, world: TenantWorld) -> None:
    response = client.patch(
        f"{API}/customers/{uuid.uuid4()}", json={}, headers={**world.key.headers, "If-Match": '"1"'}
    )

    assert response.status_code == 404


@pytest.mark.parametrize("if_match", ['"99999999999999999999999"', '"²"', '"', '""', ","])
def test_if_match_that_no_version_can_match_is_412_not_an_error(
    client: TestClient, world: TenantWorld, if_match: str
) -> None:
    customer = client.post(f"{API}/customers", json={"last_name": "A"}, headers=world.key.headers)

    response = client.patch(
        customer.headers["location"],
        json={},
        headers={**world.key.headers, "If-Match": if_match.encode("latin-1")},
    )

    assert response.status_code == 412


@pytest.mark.parametrize("header", ["If-Match", "If-None-Match"])
def test_a_conditional_header_past_1024_characters_is_422_naming_it_and_writes_nothing(
    client: TestClient, world: TenantWorld, header: str
) -> None:
    path = f"{API}/customers/by-external-id/long-{header}"
    response = client.put(
        path, json={"last_name": "A"}, headers={**world.key.headers, header: '"' + "1" * 1100 + '"'}
    )

    assert response.status_code == 422, response.text
    assert [error["field"] for error in response.json()["errors"]] == [header]
    assert (
        client.get(f"{API}/customers?external_id=long-{header}", headers=world.key.headers).json()[
            "data"
        ]
        == []
    )
