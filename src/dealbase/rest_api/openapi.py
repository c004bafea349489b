"""The OpenAPI document: FastAPI's, plus the request bodies our routes parse themselves and the
webhooks the worker sends (``openapi_webhooks``); the parameters, headers and problem responses
the routes declare."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Path, Query
from fastapi.openapi.constants import REF_TEMPLATE
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from dealbase.edge.problems import PROBLEM_MEDIA_TYPE
from dealbase.platform.pagination import CURSOR_PATTERN, MAX_PAGE_SIZE
from dealbase.platform.validation import EXTERNAL_ID_MAX_LENGTH, EXTERNAL_ID_PATTERN
from dealbase.rest_api.openapi_webhooks import webhooks
from dealbase.rest_api.schemas import Problem

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

# Checked by the platform's ExternalId rule, so REST and GraphQL answer a bad one alike.
EXTERNAL_ID_FILTER = Query(
    None,
    description="Only the record with this external id (exact, case-sensitive).",
    json_schema_extra={"pattern": EXTERNAL_ID_PATTERN, "maxLength": EXTERNAL_ID_MAX_LENGTH},
)

# An upsert's path: the pattern is declared for clients, and judged by the platform, which
# answers a bad one with 422 naming external_id rather than the 404 of a path that cannot be.
EXTERNAL_ID_PATH = Path(
    description="The client's own id for the record (docs/api.md, External ids).",
    json_schema_extra={"pattern": EXTERNAL_ID_PATTERN, "maxLength": EXTERNAL_ID_MAX_LENGTH},
)

# A string parsed by the platform's rules (RFC 3339 with an offset), not FastAPI's lax datetime.
UPDATED_SINCE = Query(
    None,
    max_length=64,
    description="Only rows changed at or after this RFC 3339 date-time, with its UTC offset.",
    json_schema_extra={"format": "date-time"},
)

_STATUS_TEXT = {
    400: (
        "The body is not JSON (`malformed_json`: empty, invalid, or `NaN`/`Infinity`), or a"
        " header that is sent once came more than once (`repeated_header`: X-Api-Key,"
        " X-Department-Id, Idempotency-Key, Content-Type, Content-Length)."
    ),
    401: "Missing or invalid credentials (one identical answer whatever was wrong).",
    403: (
        "The key is valid but not for the department in X-Department-Id (`forbidden`), or its"
        " tenant is suspended (`tenant_suspended`)."
    ),
    404: "No such resource in the caller's department (nor in any other, for this caller).",
    409: (
        "Another record of the kind in the department has the external id"
        " (`external_id_taken`); a request with the same Idempotency-Key is still running"
        " (`idempotency_key_in_use`); or the state forbids it (`conflict`: a deal in a"
        " department without pipeline steps)."
    ),
    412: (
        "If-Match names no version the resource is at (on an upsert: or no record has the"
        " external id); If-None-Match names the version it is at (`*`: it exists)."
    ),
    413: "The body exceeds 1 MiB (8 MiB for a batch), whatever the method.",
    414: (
        "The request's target (path and query) is longer than 8,192 bytes: refused by the"
        " server before the request reaches any route (`uri_too_long`)."
    ),
    415: "The body is not JSON.",
    422: (
        "A field, query parameter or header breaks a rule (`errors` names each), an"
        " Idempotency-Key came with another request (`idempotency_key_reused`), or an atomic"
        " batch had failed operations (`batch_rejected`)."
    ),
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
                    "schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)},
                    "example": example,
                }
            },
        }
    }


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "description": _STATUS_TEXT[status],
            "content": {
                PROBLEM_MEDIA_TYPE: {"schema": {"$ref": REF_TEMPLATE.format(model="Problem")}}
            },
        }
        for status in statuses
    }


# Every tag an operation or a webhook has, described once for the document's readers.
TAGS = [
    {"name": "customers", "description": "People and organisations, with their contact data."},
    {
        "name": "deals",
        "description": "Sales opportunities in the department's pipeline, with their customers.",
    },
    {
        "name": "activities",
        "description": "Calls, emails, meetings, tasks and notes about a customer.",
    },
    {
        "name": "pipeline",
        "description": "The caller's department, its pipeline steps and its employees (read only).",
    },
    {
        "name": "webhooks",
        "description": "Endpoints that receive the department's events, their signing secrets and"
        " delivery logs; and the requests the webhook worker sends them.",
    },
    {"name": "events", "description": "The department's changes in commit order, for polling."},
    {
        "name": "custom fields",
        "description": "The tenant's own typed fields on its customers, deals and activities: any"
        " key reads their definitions, a tenant-wide key defines and changes them.",
    },
]

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
        document = _document(app)
        app.openapi_schema = document
        return document

    app.openapi = build  # type: ignore[method-assign]


def _document(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    schemas = _add_model_schemas(document, app)
    _problems_for_broken_rules(document["paths"])
    _link_creates_to_their_resource(document["paths"])
    _add_edge_responses(document["paths"])
    _optional_parameters_absent_when_not_sent(document["paths"])
    _describe_absent_fields(document)
    document["webhooks"] = webhooks(schemas)
    document["tags"] = TAGS
    # Relative: the paths are served where this document is (OpenAPI 3.1, 4.8.5.1).
    document["servers"] = [{"url": "/", "description": "The server this document is from."}]
    # The edge reads the credentials itself (edge/callers.py), so FastAPI sees no security
    # dependency: every operation needs both headers together (one requirement, AND).
    document["components"]["securitySchemes"] = SECURITY_SCHEMES
    for path_item in document["paths"].values():
        for operation in path_item.values():
            operation["security"] = [{name: [] for name in SECURITY_SCHEMES}]
    return document


def _add_model_schemas(document: dict[str, Any], app: FastAPI) -> dict[str, Any]:
    """The component schemas of the response models and of the request bodies the routes
    parse themselves, as pydantic writes them; returns the document's component schemas."""
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    # FastAPI's schemas of the response models are written without a single null (it encodes
    # the document with exclude_none), their examples' nulls included: pydantic's own replace
    # them, as it writes the request bodies' too.
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        *((model, "serialization") for model in _response_models(app)),
        *((model, "validation") for model in _BODY_MODELS),
    ]
    for model, mode in modes:
        schema = model.model_json_schema(ref_template=REF_TEMPLATE, mode=mode)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    # FastAPI documents its own 422 body for routes with parameters; ours is a problem.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return schemas


def _problems_for_broken_rules(paths: dict[str, Any]) -> None:
    """A 422 is a problem, on the operations that can answer it; the others lose FastAPI's."""
    for path_item in paths.values():
        for operation in path_item.values():
            responses = operation.get("responses", {})
            if "422" not in responses:
                continue
            if _judges_more_than_its_path(operation):
                responses["422"] = problem_responses(422)[422]
            else:
                del responses["422"]


def _judges_more_than_its_path(operation: dict[str, Any]) -> bool:
    """Whether the operation can answer 422: an id in its path that is no id is 404, as an
    unknown one (edge.problems), so only a body, a query or a header can break a rule."""
    return "requestBody" in operation or any(
        parameter["in"] != "path" for parameter in operation.get("parameters", [])
    )


def _response_models(app: FastAPI) -> list[type[BaseModel]]:
    """The models the routes answer with, as they name them in their ``responses``."""
    return [
        response["model"]
        for route in app.routes
        if isinstance(route, APIRoute)
        for response in route.responses.values()
        if "model" in response
    ]


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


def _add_edge_responses(paths: dict[str, Any]) -> None:
    """What every operation may answer whatever its route, since the request edge and the
    admission judge a request before its route does: a header sent twice (400), a body past
    its cap (413, whatever the method), a target too long for the server (414), the credentials (401, 403), the rate limits (429, with
    Retry-After) and the database or the limits' store unavailable (503). Every response that
    passed admission carries the RateLimit headers. The responses are then in status order."""
    for operations in paths.values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status, response in responses.items():
                if status.startswith("2"):
                    response.setdefault("headers", {}).update(_RATE_LIMIT_HEADERS)
            for status, response in problem_responses(400, 401, 403, 413, 414).items():
                responses.setdefault(str(status), response)
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
            operation["responses"] = dict(sorted(responses.items()))


_NULL = {"type": "null"}


def _optional_parameters_absent_when_not_sent(paths: dict[str, Any]) -> None:
    """An optional query or header parameter has a value or is not sent: there is no null to
    send. FastAPI shows a ``str | None`` parameter as ``anyOf [string, null]``, which clients
    generated from the document type as nullable (and pass None on to their HTTP library)."""
    for operations in paths.values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                schema = parameter["schema"]
                if parameter.get("required") or _NULL not in schema.get("anyOf", []):
                    continue
                (value,) = [branch for branch in schema["anyOf"] if branch != _NULL]
                rest = {key: item for key, item in schema.items() if key != "anyOf"}
                parameter["schema"] = {**value, **rest}


# What a request body does with its record, by its operation's method.
_ROLE_OF_METHOD = {"post": "create", "put": "upsert", "patch": "update"}
# A batch operation names in `op` what its `data` does.
_BATCH_ROLES = ("create", "upsert")

# What leaving out an optional field means, by what the bodies whose schema it is in do and
# whether the field takes null (docs/api.md: Request bodies, Updates, Upsert).
_UPSERTED_NULLABLE = (
    "Optional: left out or `null`, a new record has no value; an upsert that finds the record"
    " keeps its value when it is left out and clears it on `null`."
)
_ABSENT_MEANS = {
    (frozenset({"create"}), True): "Optional: left out or `null`, it has no value.",
    (frozenset({"create", "upsert"}), True): _UPSERTED_NULLABLE,
    (frozenset({"upsert"}), True): _UPSERTED_NULLABLE,
    (frozenset({"upsert"}), False): (
        "Optional: left out, a new record takes its default and an existing one keeps its"
        " value; never `null` (422 `cannot_clear`)."
    ),
    (frozenset({"update"}), True): "Left out, it keeps its value; `null` clears it.",
    # A part given whole in both (a custom field's option).
    (frozenset({"create", "update"}), True): "Optional: left out or `null`, it has no value.",
    (frozenset({"update"}), False): (
        "Left out, it keeps its value; it cannot be cleared (`null` is 422 `cannot_clear`)."
    ),
}


def _describe_absent_fields(document: dict[str, Any]) -> None:
    """No ``default`` on a request body's field: generators read a default as a value the field
    always has, and make the field required in the body (openapi-typescript does, by its
    defaults); pydantic writes ``"default": null`` for every ``X | None = None`` field, on a
    PATCH also wrong in meaning (a field left out keeps its value). Each optional field of a
    request body says instead what leaving it out means."""
    schemas: dict[str, Any] = document["components"]["schemas"]
    roles = request_body_roles(document["paths"], schemas)
    for name, schema in schemas.items():
        required = schema.get("required", [])
        for field_name, field in schema.get("properties", {}).items():
            if field_name in required or "default" not in field:
                continue
            if name not in roles:
                if field["default"] is None:
                    del field["default"]
                continue
            default = field.pop("default")
            if default is None:
                meaning = _ABSENT_MEANS[frozenset(roles[name]), _NULL in field.get("anyOf", [])]
            elif roles[name] in ({"create"}, {"create", "update"}):
                meaning = f"Optional: left out, it is `{json.dumps(default)}`."
            else:
                raise ValueError(f"{name}.{field_name}: no words for a default on {roles[name]}")
            # pydantic puts an annotated type's description on the value's branch of anyOf.
            (value, *_) = [branch for branch in field.get("anyOf", [field]) if branch != _NULL]
            described = field.get("description") or value.pop("description", None)
            field["description"] = f"{described} {meaning}" if described else meaning


def request_body_roles(paths: dict[str, Any], schemas: dict[str, Any]) -> dict[str, set[str]]:
    """The component schemas request bodies use, each with what the bodies it is part of do:
    ``create``, ``upsert`` or ``update``."""
    roles: dict[str, set[str]] = {}

    def visit(node: object, role: str) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, role)
            return
        if not isinstance(node, dict):
            return
        reference = node.get("$ref")
        if isinstance(reference, str):
            name = reference.removeprefix(REF_TEMPLATE.format(model=""))
            if role not in roles.setdefault(name, set()):
                roles[name].add(role)
                visit(schemas[name], role)
            return
        kind = node.get("properties", {}).get("op", {}).get("const")
        for item in node.values():
            visit(item, kind if kind in _BATCH_ROLES else role)

    for operations in paths.values():
        for method, operation in operations.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                visit(media["schema"], _ROLE_OF_METHOD[method])
    return roles
