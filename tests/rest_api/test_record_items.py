"""GET, PATCH and DELETE of one synced record by id, as every record answers them (customers,
deals, activities; the routes of ``rest_api/records.py``): unknown, malformed and other
departments' ids, the ETag of a change, and a delete. What is particular to one record is in
its own module."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from fastapi.testclient import TestClient

from tests.rest_api.records_support import API, SyncedApi
from tests.support import TenantWorld


def test_an_unknown_or_malformed_id_is_404_to_every_verb(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    for record_id in (str(uuid.uuid4()), "not-a-uuid"):
        path = f"{API}/{record.plural}/{record_id}"
        for response in (
            client.get(path, headers=headers),
            client.patch(path, json={record.label: "x"}, headers=headers),
            client.delete(path, headers=headers),
        ):
            assert response.status_code == 404, (record_id, response.request.method)
            assert response.json()["code"] == "not_found"


def test_a_record_of_another_department_is_404_to_every_verb_and_stays_as_it_was(
    client: TestClient, make_tenant: Callable[..., TenantWorld], record: SyncedApi
) -> None:
    world = make_tenant(departments=2)
    own, other = world.keys
    made = record.create(client, own.headers).json()
    path = f"{API}/{record.plural}/{made['id']}"

    assert client.get(path, headers=other.headers).status_code == 404
    assert client.patch(path, json={record.label: "x"}, headers=other.headers).status_code == 404
    assert client.delete(path, headers=other.headers).status_code == 404
    assert client.get(path, headers=own.headers).json() == made


def test_a_patch_returns_a_new_etag_that_get_agrees_with(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    created = record.create(client, headers)
    path = f"{API}/{record.plural}/{created.json()['id']}"

    response = client.patch(path, json={record.label: "Second try"}, headers=headers)

    assert response.status_code == 200
    assert response.json()[record.label] == "Second try"
    assert response.headers["etag"] != created.headers["etag"]
    assert client.get(path, headers=headers).headers["etag"] == response.headers["etag"]


def test_a_delete_is_204_and_afterwards_the_record_is_gone(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    made = record.create(client, headers).json()
    path = f"{API}/{record.plural}/{made['id']}"

    response = client.delete(path, headers=headers)

    assert response.status_code == 204
    assert response.content == b""
    assert client.get(path, headers=headers).status_code == 404
    assert client.patch(path, json={record.label: "x"}, headers=headers).status_code == 404
    assert client.delete(path, headers=headers).status_code == 404
    assert "Made" not in record.labels(client, headers)
