"""Keyset pagination: every row exactly once, even while rows are being inserted."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support import TenantWorld

API = "/api/v1/integration"


def create_customers(client: TestClient, world: TenantWorld, count: int, prefix: str) -> list[str]:
    return [
        client.post(
            f"{API}/customers", json={"last_name": f"{prefix}{i}"}, headers=world.key.headers
        ).json()["id"]
        for i in range(count)
    ]


def walk(
    client: TestClient, world: TenantWorld, path: str, limit: int, between_pages: Any = None
) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        page = client.get(f"{API}{path}", params=params, headers=world.key.headers)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["data"]) <= limit
        seen += [item["id"] for item in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
        if between_pages is not None:
            between_pages()


def test_walking_the_cursors_returns_every_row_once_while_rows_are_inserted(
    client: TestClient, world: TenantWorld
) -> None:
    existing = create_customers(client, world, 53, "existing")
    inserted: list[str] = []

    seen = walk(
        client,
        world,
        "/customers",
        limit=7,
        between_pages=lambda: inserted.extend(create_customers(client, world, 2, "new")),
    )

    assert len(seen) == len(set(seen)), "a row came twice"
    assert set(existing) <= set(seen), "a row that existed before paging was skipped"
    assert set(seen) <= set(existing) | set(inserted)
    assert seen == sorted(seen)


def test_last_page_has_no_cursor_and_exact_multiple_ends_cleanly(
    client: TestClient, world: TenantWorld
) -> None:
    create_customers(client, world, 10, "c")

    first = client.get(f"{API}/customers", params={"limit": 5}, headers=world.key.headers).json()
    second = client.get(
        f"{API}/customers",
        params={"limit": 5, "cursor": first["next_cursor"]},
        headers=world.key.headers,
    ).json()

    assert len(first["data"]) == 5 and first["next_cursor"] is not None
    assert len(second["data"]) == 5 and second["next_cursor"] is None


def test_default_page_size_is_25(client: TestClient, world: TenantWorld) -> None:
    create_customers(client, world, 26, "c")

    page = client.get(f"{API}/customers", headers=world.key.headers).json()

    assert len(page["data"]) == 25 and page["next_cursor"] is not None
