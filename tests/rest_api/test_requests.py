"""What the HTTP layer refuses before any rule is asked: bad JSON, other media, big bodies."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Message, Scope

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.edge.request_edge import MAX_BODY_BYTES
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"


def post_raw(
    client: TestClient, world: TenantWorld, content: bytes, content_type: str | None
) -> tuple[int, dict[str, object], str]:
    headers = dict(world.key.headers)
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = client.post(CUSTOMERS, content=content, headers=headers)
    return response.status_code, response.json(), response.headers["content-type"]


@pytest.mark.parametrize(
    "content",
    [b"{", b"", b"   ", b'{"last_name": "x",}', b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000],
)
def test_malformed_json_is_400(client: TestClient, world: TenantWorld, content: bytes) -> None:
    status, problem, media = post_raw(client, world, content, "application/json")

    assert status == 400
    assert problem["code"] == "malformed_json"
    assert media == "application/problem+json"


@pytest.mark.parametrize(
    "content",
    [
        b'{"last_name": "x", "note": NaN}',
        b'{"last_name": "x", "note": Infinity}',
        b'{"last_name": "x", "note": [-Infinity]}',
    ],
)
def test_nan_and_infinity_which_json_does_not_have_are_malformed_json(
    client: TestClient, world: TenantWorld, content: bytes
) -> None:
    status, problem, _ = post_raw(client, world, content, "application/json")

    assert (status, problem["code"]) == (400, "malformed_json")
    assert "is not a JSON value" in str(problem["detail"])


def test_nan_and_infinity_inside_strings_are_text(client: TestClient, world: TenantWorld) -> None:
    content = b'{"last_name": "NaN", "note": "Infinity and beyond"}'

    status, created, _ = post_raw(client, world, content, "application/json")

    assert status == 201
    assert (created["last_name"], created["note"]) == ("NaN", "Infinity and beyond")


@pytest.mark.parametrize("body", [b"[]", b'"Lovelace"', b"null", b"42"])
def test_json_that_is_not_an_object_is_422(
    client: TestClient, world: TenantWorld, body: bytes
) -> None:
    status, problem, _ = post_raw(client, world, body, "application/json")

    assert status == 422
    assert problem["code"] == "validation_failed"


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"],
)
def test_body_that_is_not_json_is_415(
    client: TestClient, world: TenantWorld, content_type: str | None
) -> None:
    status, problem, _ = post_raw(client, world, b'{"last_name": "x"}', content_type)

    assert status == 415
    assert problem["code"] == "unsupported_media_type"


def test_json_with_utf8_charset_is_accepted(client: TestClient, world: TenantWorld) -> None:
    status, _, _ = post_raw(client, world, b'{"last_name": "x"}', "application/json; charset=UTF-8")

    assert status == 201


def test_body_over_one_mebibyte_is_413(client: TestClient, world: TenantWorld) -> None:
    padding = "x" * MAX_BODY_BYTES
    status, problem, _ = post_raw(
        client, world, f'{{"last_name": "x", "note": "{padding}"}}'.encode(), "application/json"
    )

    assert status == 413
    assert problem["code"] == "payload_too_large"


def test_problem_carries_the_request_id_of_the_response(
    client: TestClient, world: TenantWorld
) -> None:
    response = client.post(
        CUSTOMERS, json={}, headers={**world.key.headers, "X-Request-Id": "abc-123"}
    )

    assert response.headers["x-request-id"] == "abc-123"
    assert response.json()["request_id"] == "abc-123"
    assert {"type", "title", "status", "detail", "code", "request_id", "errors"} <= set(
        response.json()
    )


def test_unknown_path_and_wrong_method_are_problems(client: TestClient, world: TenantWorld) -> None:
    missing = client.get("/api/v1/integration/nothing", headers=world.key.headers)
    wrong_method = client.put(CUSTOMERS, json={}, headers=world.key.headers)

    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    assert (wrong_method.status_code, wrong_method.json()["code"]) == (405, "method_not_allowed")
    assert wrong_method.headers["allow"] == "GET, HEAD, POST"
    item = client.put(f"{CUSTOMERS}/{uuid.uuid4()}", json={}, headers=world.key.headers)
    assert item.headers["allow"] == "DELETE, GET, HEAD, PATCH"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/graphql", "GET, HEAD, POST"),
        ("/openapi.json", "GET, HEAD"),
        ("/docs", "GET, HEAD"),
        ("/healthz", "GET, HEAD"),
    ],
)
def test_a_405_names_the_methods_a_path_the_document_leaves_out_takes(
    client: TestClient, path: str, allowed: str
) -> None:
    response = client.put(path)

    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    assert response.json()["detail"] == f"This path allows {allowed}."


@pytest.mark.parametrize("query", ["q=a%00b", "email=x%00%40y"])
def test_nul_in_a_search_term_is_422_not_an_error(
    client: TestClient, world: TenantWorld, query: str
) -> None:
    response = client.get(f"{CUSTOMERS}?{query}", headers=world.key.headers)

    assert response.status_code == 422
    assert response.json()["errors"][0]["code"] == "invalid_character"


@pytest.mark.parametrize("value", ["0.5", "1700000000", "2026-01-01", "2026-01-01T00:00:00"])
@pytest.mark.parametrize("path", ["/api/v1/integration/customers", "/api/v1/integration/deals"])
def test_updated_since_must_be_an_rfc3339_date_time_with_offset(
    client: TestClient, world: TenantWorld, value: str, path: str
) -> None:
    response = client.get(path, params={"updated_since": value}, headers=world.key.headers)

    assert response.status_code == 422
    assert response.json()["errors"][0] == {
        **response.json()["errors"][0],
        "field": "updated_since",
        "code": "invalid_datetime",
    }


def test_streamed_body_over_one_mebibyte_is_413(client: TestClient, world: TenantWorld) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"last_name": "x", "note": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 1):
            yield b"x" * 65536
        yield b'"}'

    response = client.post(
        CUSTOMERS,
        content=chunks(),
        headers={**world.key.headers, "Content-Type": "application/json"},
    )

    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


def test_graphql_body_over_one_mebibyte_is_413(client: TestClient, world: TenantWorld) -> None:
    query = "{ departments { id } }" + " " * MAX_BODY_BYTES

    response = client.post("/graphql", json={"query": query}, headers=world.key.headers)

    assert response.status_code == 413


def test_a_client_gone_before_its_body_arrived_is_499_not_an_internal_error(
    client: TestClient, world: TenantWorld
) -> None:
    app = client.app
    sent: list[Message] = []
    # A body of 100 bytes announced, none of it sent.
    scope = _post_scope(CUSTOMERS, world.key.headers, bytes(100))

    async def gone() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async def call() -> None:
        await app(scope, gone, send)

    asyncio.run(call())

    # Not 500: nobody reads it, but the access line and the metrics tell it from our failures.
    assert sent[0]["status"] == 499


def test_white_space_around_a_header_value_is_not_part_of_it(
    client: TestClient, world: TenantWorld
) -> None:
    pasted = {name: f" {value}\t " for name, value in world.key.headers.items()}

    response = client.get(CUSTOMERS, headers=pasted)

    assert response.status_code == 200, response.text


def test_head_is_answered_wherever_get_is_with_the_same_head_and_no_body(
    client: TestClient, world: TenantWorld
) -> None:
    created = client.post(CUSTOMERS, json={"last_name": "Lovelace"}, headers=world.key.headers)
    one = f"{CUSTOMERS}/{created.json()['id']}"
    for path in (CUSTOMERS, one, "/healthz"):
        got = client.get(path, headers=world.key.headers)
        head = client.head(path, headers=world.key.headers)

        assert (head.status_code, head.content) == (got.status_code, b""), path
        for name in ("content-type", "content-length", "etag"):
            assert head.headers.get(name) == got.headers.get(name), (path, name)


def _post_scope(path: str, headers: dict[str, str], body: bytes) -> Scope:
    """A JSON POST's scope as a server gives it to the app, its length ``body``'s."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            *[(name.lower().encode(), value.encode()) for name, value in headers.items()],
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }


def _asgi_post(app: Any, path: str, headers: dict[str, str], body: bytes) -> tuple[Scope, int]:
    """The scope the app was called with, and the status it answered."""
    sent: list[Message] = []
    scope = _post_scope(path, headers, body)

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return scope, sent[0]["status"]


def test_a_create_is_called_from_the_edge_and_its_errors_are_still_problems(
    settings: Settings, world: TenantWorld
) -> None:
    """A route called directly skips the exception layer, FastAPI's exit stack and the router;
    its errors are answered by the same handlers, which the layer showed the edge in the scope
    of a request it served (the app's first goes through it)."""
    with TestClient(create_app(settings)) as client:
        app = client.app
        first, first_status = _asgi_post(app, CUSTOMERS, world.key.headers, b'{"last_name": "A"}')
        created, status = _asgi_post(app, CUSTOMERS, world.key.headers, b'{"last_name": "A"}')
        refused, refused_status = _asgi_post(app, CUSTOMERS, world.key.headers, b'{"x": 1}')
        batch = b'{"operations": [{"op": "create", "data": {"last_name": "B"}}]}'
        batched, batch_status = _asgi_post(app, f"{CUSTOMERS}/batch", world.key.headers, batch)

    assert (first_status, status, refused_status) == (201, 201, 422)
    assert "fastapi_middleware_astack" in first
    assert "fastapi_middleware_astack" not in created
    assert "fastapi_middleware_astack" not in refused
    assert created["route"].path == refused["route"].path == CUSTOMERS
    # A route FastAPI's request handler serves (a body parameter) goes through every layer.
    assert batch_status == 200
    assert "fastapi_middleware_astack" in batched


@pytest.mark.parametrize("path", [CUSTOMERS, "/graphql"])
def test_a_body_that_stops_arriving_is_answered_408_and_its_connection_closed(
    settings: Settings, world: TenantWorld, path: str
) -> None:
    """The client sends half its body and no more: the edge answers once the setting's time
    since the head has passed (the test waits for the answer, however long the machine takes),
    and nothing is written."""
    body = b'{"first_name": "Trickled", "last_name": "Body"}'
    sent: list[Message] = []
    scope = _post_scope(path, dict(world.key.headers), body)
    parts = [body[:10]]

    async def trickle() -> Message:
        if parts:
            return {"type": "http.request", "body": parts.pop(), "more_body": True}
        await asyncio.Event().wait()  # the rest never comes
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    impatient = settings.model_copy(update={"body_timeout_seconds": 1})
    with TestClient(create_app(impatient), raise_server_exceptions=False) as client:
        asyncio.run(client.app(scope, trickle, send))  # type: ignore[arg-type]
        listed = client.get(CUSTOMERS, params={"q": "Trickled"}, headers=world.key.headers)

    assert sent[0]["status"] == 408
    headers = dict(sent[0]["headers"])
    assert headers[b"connection"] == b"close"
    assert headers[b"content-type"] == b"application/problem+json"
    problem_body = json.loads(sent[1]["body"])
    assert problem_body["code"] == "request_timeout"
    assert "1 seconds" in problem_body["detail"]
    assert listed.status_code == 200 and listed.json()["data"] == []
