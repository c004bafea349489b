"""GraphQL over HTTP as the specification has it: ``application/graphql-response+json`` for
clients that ask for it (a request error 400, a field error 200), ``application/json`` as before
for the others (200 whenever GraphQL answered), no ``data`` entry on a request error, and a
mutation by GET refused with 405 and ``Allow: POST``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.graphql_api.support import GRAPHQL
from tests.support import TenantWorld

GRAPHQL_RESPONSE = "application/graphql-response+json"
PREFERS_GRAPHQL_RESPONSE = f"{GRAPHQL_RESPONSE}, application/json;q=0.9"


def _post(
    client: TestClient, world: TenantWorld, query: str, accept: str | None
) -> tuple[int, str, dict[str, Any]]:
    headers = dict(world.key.headers)
    if accept is not None:
        headers["Accept"] = accept
    response = client.post(GRAPHQL, json={"query": query}, headers=headers)
    return response.status_code, response.headers["content-type"], response.json()


@pytest.mark.parametrize(
    ("accept", "media_type"),
    [
        (PREFERS_GRAPHQL_RESPONSE, GRAPHQL_RESPONSE),
        (GRAPHQL_RESPONSE, GRAPHQL_RESPONSE),
        (f"application/json, {GRAPHQL_RESPONSE};q=0.9", "application/json"),
        ("application/json", "application/json"),
        ("*/*", "application/json"),
        (None, "application/json"),
    ],
)
def test_the_response_has_the_media_type_the_client_prefers(
    client: TestClient, world: TenantWorld, accept: str | None, media_type: str
) -> None:
    status, content_type, body = _post(client, world, "{ __typename }", accept)

    assert (status, content_type.split(";")[0]) == (200, media_type)
    assert body == {"data": {"__typename": "Query"}, "extensions": body["extensions"]}


@pytest.mark.parametrize(
    ("accept", "status"), [(PREFERS_GRAPHQL_RESPONSE, 400), ("application/json", 200)]
)
@pytest.mark.parametrize("query", ["{ deals {", "{ noSuchField }"], ids=["syntax", "validation"])
def test_a_request_error_has_no_data_entry_and_is_400_for_graphql_response_clients(
    client: TestClient, world: TenantWorld, accept: str, status: int, query: str
) -> None:
    answered, _, body = _post(client, world, query, accept)

    assert answered == status
    assert "data" not in body
    assert body["errors"]


def test_a_field_error_keeps_its_data_entry_and_status_200(
    client: TestClient, world: TenantWorld
) -> None:
    query = f'{{ customer(id: "{uuid.UUID(int=1)}") {{ id }} }}'

    status, content_type, body = _post(client, world, query, PREFERS_GRAPHQL_RESPONSE)

    assert (status, content_type.split(";")[0]) == (200, GRAPHQL_RESPONSE)
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["path"] == ["customer"]


def test_a_mutation_by_get_is_405_with_allow_post(client: TestClient, world: TenantWorld) -> None:
    response = client.get(
        GRAPHQL,
        params={"query": f'mutation {{ deleteCustomer(id: "{uuid.UUID(int=1)}") }}'},
        headers={**world.key.headers, "Accept": PREFERS_GRAPHQL_RESPONSE},
    )

    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "method_not_allowed"


def test_a_query_by_get_still_answers(client: TestClient, world: TenantWorld) -> None:
    response = client.get(GRAPHQL, params={"query": "{ __typename }"}, headers=world.key.headers)

    assert response.status_code == 200
    assert response.json()["data"] == {"__typename": "Query"}
    assert response.headers["vary"] == "Accept"
