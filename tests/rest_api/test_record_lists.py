"""POST /{records} and GET /{records} as every synced record answers them (customers, deals,
activities): a create's location and ETag, a list's items and pages, and its cursors. A record's
own fields, rules and filters are tested in its own module."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from tests.rest_api.records_support import API, SyncedApi
from tests.support import TenantWorld


def test_a_create_is_201_at_its_location_with_an_etag_and_reads_back_identically(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers

    created = record.create(client, headers, "Made")

    body = created.json()
    assert created.headers["location"] == f"{API}/{record.plural}/{body['id']}"
    assert re.fullmatch(r'"\d+"', created.headers["etag"])
    assert body[record.label] == "Made"
    again = client.get(created.headers["location"], headers=headers)
    assert again.status_code == 200
    assert again.json() == body
    assert again.headers["etag"] == created.headers["etag"]


def test_a_list_item_is_the_record_as_read(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    made = record.create(client, headers, "Listed").json()

    page = client.get(f"{API}/{record.plural}", headers=headers).json()

    assert page == {"data": [made], "next_cursor": None}


def test_a_list_pages_through_every_record_exactly_once(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    headers = world.key.headers
    made = [record.create(client, headers, f"R{n}").json()["id"] for n in range(12)]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 5}

    while True:
        page = client.get(f"{API}/{record.plural}", params=params, headers=headers).json()
        assert len(page["data"]) <= 5
        seen += [item["id"] for item in page["data"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]

    assert seen == made


def test_a_garbage_cursor_is_422_naming_cursor(
    client: TestClient, world: TenantWorld, record: SyncedApi
) -> None:
    for cursor in ("garbage", "A" * 30, "A" * 29 + "=", "A" * 31):
        response = client.get(
            f"{API}/{record.plural}", params={"cursor": cursor}, headers=world.key.headers
        )

        assert response.status_code == 422, cursor
        assert [error["field"] for error in response.json()["errors"]] == ["cursor"], cursor
