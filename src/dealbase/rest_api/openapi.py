"""The OpenAPI document: FastAPI's, plus the request bodies our routes parse themselves."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Query
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from dealbase.edge.problems import PROBLEM_MEDIA_TYPE
from dealbase.platform.pagination import CURSOR_PATTERN, MAX_PAGE_SIZE
from dealbase.rest_api.schemas import Problem

_REF = "#/components/schemas/{model}"
_BODY_MODELS: list[type[BaseModel]] = [Problem]

ETAG_HEADER = {"description": "The resource's version, for If-Match.", "schema": {"type": "string"}}
READ_HEADERS = {"ETag": ETAG_HEADER}
REPLAYED_HEADER = {
    "description": "`true` when this is the stored response to an earlier request with the"
    " same Idempotency-Key.",
    "schema": {"type": "string", "enum": ["true"]},
}
CREATED_HEADERS = {
    "Location": {"description": "Path of the new resource.", "schema": {"type": "string"}},
    "ETag": ETAG_HEADER,
    "Idempotent-Replayed": REPLAYED_HEADER,
}
# A request accepted for work done later, whose answer an Idempotency-Key replays.
ACCEPTED_HEADERS = {"Idempotent-Replayed": REPLAYED_HEADER}
LIST_LIMIT = Query(
    None, ge=1, le=MAX_PAGE_SIZE, description=f"Page size, 1 to {MAX_PAGE_SIZE} (default 25)."
)
LIST_CURSOR = Query(
    None,
    pattern=CURSOR_PATTERN,
    description="The `next_cursor` of the previous page, under the same filters; omit for the first.",
)

# A string parsed by the platform's rules (RFC 3339 with an offset), not FastAPI's lax datetime.
UPDATED_SINCE = Query(
    None,
    max_length=64,
    description="Only rows changed at or after this RFC 3339 date-time, with its UTC offset.",
    json_schema_extra={"format": "date-time"},
)

_STATUS_TEXT = {
    400: "Malformed JSON.",
    401: "Missing or invalid credentials (one identical answer whatever was wrong).",
    403: "The key is valid but not for the department in X-Department-Id.",
    404: "No such resource in the caller's department (nor in any other, for this caller).",
    409: "A request with the same Idempotency-Key is still running, or the state forbids it.",
    412: "If-Match does not match the current ETag.",
    413: "The body exceeds 1 MiB.",
    415: "The body is not JSON.",
    422: "A field breaks a rule (`errors` names each), or an Idempotency-Key came with another body.",
    429: (
        "A rate limit (the key's or the tenant's) is exceeded, or the client address failed"
        " authentication too often (refused whatever its credentials); retry after"
        " `Retry-After` seconds."
    ),
    503: (
        "Retry after `Retry-After` seconds: the database is unavailable (`database_unavailable`)"
        " or did not finish in time (`database_timeout`, nothing written), or rate limits"
        " cannot be checked and the service is set to refuse (`service_unavailable`)."
    ),
}


def json_request_body(model: type[BaseModel], example: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` for a route that validates ``model`` from the raw body itself."""
    if model not in _BODY_MODELS:
        _BODY_MODELS.append(model)
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": _REF.format(model=model.__name__)},
                    "example": example,
                }
            },
        }
    }


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "description": _STATUS_TEXT[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": _REF.format(model="Problem")}}},
        }
        for status in statuses
    }


SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "ApiKey": {
        "type": "apiKey",
        "description": "The integration's secret, as issued by `dealbase key issue`.",
        "in": "header",
        "name": "X-Api-Key",
    },
    "DepartmentId": {
        "type": "apiKey",
        "description": "The id of the department the key was issued for.",
        "in": "header",
        "name": "X-Department-Id",
    },
}


def install_openapi(app: FastAPI) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for model in _BODY_MODELS:
            schema = model.model_json_schema(ref_template=_REF)
            schemas.update(schema.pop("$defs", {}))
            schemas[model.__name__] = schema
        # FastAPI documents its own 422 body for routes with parameters; ours is a problem.
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        for path_item in document.get("paths", {}).values():
            for operation in path_item.values():
                responses = operation.get("responses", {})
                if "422" in responses:
                    responses["422"] = problem_responses(422)[422]
        _link_creates_to_their_resource(document["paths"])
        _add_rate_limit_responses(document["paths"])
        # The edge reads the credentials itself (edge/callers.py), so FastAPI sees no security
        # dependency: every operation needs both headers together (one requirement, AND).
        document["components"]["securitySchemes"] = SECURITY_SCHEMES
        for path_item in document.get("paths", {}).values():
            for operation in path_item.values():
                operation["security"] = [{name: [] for name in SECURITY_SCHEMES}]
        app.openapi_schema = document
        return document

    app.openapi = build  # type: ignore[method-assign]


def _link_creates_to_their_resource(paths: dict[str, Any]) -> None:
    """OpenAPI ``links`` from each create's 201 to the operations on what it created, so clients
    and stateful testers can follow ``id`` from the response into the next call."""
    for collection, operations in paths.items():
        created = operations.get("post", {}).get("responses", {}).get("201")
        if created is None:
            continue
        links: dict[str, Any] = {}
        for path, item_operations in paths.items():
            rest = path.removeprefix(collection + "/")
            if rest == path or not rest.startswith("{"):
                continue
            parameter, _, tail = rest[1:].partition("}")
            if "{" in tail:  # needs a second id this response cannot supply
                continue
            for operation in item_operations.values():
                name = operation["operationId"]
                links[name] = {
                    "operationId": name,
                    "parameters": {parameter: "$response.body#/id"},
                    "description": f"`{parameter}` is the `id` of the created resource.",
                }
        if links:
            created["links"] = links


_RATE_LIMIT_HEADERS = {
    "RateLimit-Policy": {
        "description": 'The limits (IETF RateLimit header fields): `"key";q=<burst>;w=<seconds to'
        ' refill>, "tenant";q=...;w=...`.',
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": 'The limit closest to running out: `"<policy>";r=<requests left>;t=<seconds'
        " until full>`.",
        "schema": {"type": "string"},
    },
}


def _add_rate_limit_responses(paths: dict[str, Any]) -> None:
    """Every authenticated operation is rate limited: its responses carry the RateLimit
    headers, and it may answer 429 (with Retry-After) or 503 (the database or the rate limits'
    store unavailable)."""
    for operations in paths.values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status, response in responses.items():
                if status.startswith("2"):
                    response.setdefault("headers", {}).update(_RATE_LIMIT_HEADERS)
            refused = problem_responses(429)[429]
            refused["headers"] = {
                "Retry-After": {
                    "description": "Whole seconds (at least 1) after which the request will pass.",
                    "schema": {"type": "integer", "minimum": 1},
                },
                **_RATE_LIMIT_HEADERS,
            }
            responses["429"] = refused
            unavailable = problem_responses(503)[503]
            unavailable["headers"] = {
                "Retry-After": {
                    "description": "Whole seconds after which a retry may succeed (the database"
                    " codes send it).",
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
            responses["503"] = unavailable
