"""Helpers for the GraphQL tests: send an operation, read its data or its errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.support import TenantWorld

GRAPHQL = "/graphql"


def gql(
    client: TestClient,
    query: str,
    variables: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON body of a POST to /graphql, which answers 200 for every operation it ran."""
    response = client.post(
        GRAPHQL, json={"query": query, "variables": dict(variables or {})}, headers=headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def data_of(
    client: TestClient,
    query: str,
    variables: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``data`` of an operation that must succeed."""
    body = gql(client, query, variables, headers)
    assert "errors" not in body, body["errors"]
    data: dict[str, Any] = body["data"]
    return data


def codes_of(body: Mapping[str, Any]) -> list[str]:
    """The ``extensions.code`` of each error, in order."""
    return [error["extensions"]["code"] for error in body.get("errors") or []]


def tenant_wide_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    """A tenant-wide dashboard key of ``world``'s tenant: no X-Department-Id needed."""
    issued = admin.issue_key(database, world.tenant.id, None, "dashboard")
    return {"X-Api-Key": issued.api_key}
