"""Building successful responses: customers, deals and activities as the platform shapes them
(``platform.resources``), the pipeline's objects through their wire models."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from dealbase.edge.problems import domain_problem
from dealbase.platform.batches.models import Result
from dealbase.platform.pagination import Page
from dealbase.platform.resources import JsonObject


class Versioned(Protocol):
    @property
    def version(self) -> int: ...


Resource = TypeVar("Resource", bound=Versioned)

API_PREFIX = "/api/v1/integration"


def etag(version: int) -> str:
    return f'"{version}"'


def json_response(model: type[BaseModel], value: object, status: int = 200) -> Response:
    """``value`` through ``model``; a versioned value also gets its ``ETag``."""
    response = Response(
        model.model_validate(value).model_dump_json(), status, media_type="application/json"
    )
    version = getattr(value, "version", None)
    if isinstance(version, int):
        response.headers["ETag"] = etag(version)
    return response


def resource_response(
    shape: Callable[[Resource], JsonObject], value: Resource, status: int = 200
) -> Response:
    """A customer, deal or activity as ``shape`` (a ``platform.resources`` function) shows it,
    with its version as the ``ETag``."""
    response = Response(orjson.dumps(shape(value)), status, media_type="application/json")
    response.headers["ETag"] = etag(value.version)
    return response


def json_text_response(version: int, text: str) -> Response:
    """``resource_response`` of a record PostgreSQL wrote as JSON text."""
    response = Response(text.encode(), media_type="application/json")
    response.headers["ETag"] = etag(version)
    return response


def created_from_json_text(
    record_id: uuid.UUID, version: int, text: str, collection: str
) -> Response:
    """``created`` of a record PostgreSQL wrote as JSON text, in ``collection`` (its path)."""
    response = json_text_response(version, text)
    response.status_code = 201
    response.headers["Location"] = f"{API_PREFIX}{collection}/{record_id}"
    return response


def created(shape: Callable[[Resource], JsonObject], value: Resource, location: str) -> Response:
    response = resource_response(shape, value, 201)
    response.headers["Location"] = API_PREFIX + location
    return response


def created_as(model: type[BaseModel], value: object, location: str) -> Response:
    """``created`` for what is shown through a wire model rather than a ``platform.resources``
    shape (a webhook endpoint with its secret)."""
    response = json_response(model, value, 201)
    response.headers["Location"] = API_PREFIX + location
    return response


def page_response(model: type[BaseModel], page: Page[Any]) -> Response:
    return json_response(model, {"data": page.items, "next_cursor": page.next_cursor})


def json_text_page(page: Page[str]) -> Response:
    """A page of records PostgreSQL wrote as JSON text (``{"data": [...], "next_cursor": ...}``):
    joined, not parsed."""
    body = b"".join(
        (
            b'{"data":[',
            ",".join(page.items).encode(),
            b'],"next_cursor":',
            orjson.dumps(page.next_cursor),
            b"}",
        )
    )
    return Response(body, media_type="application/json")


_OUTCOME_STATUS = {"created": 201, "updated": 200, "unchanged": 200}


def batch_response(
    request: Request, shape: Callable[[Resource], JsonObject], results: Sequence[Result[Resource]]
) -> Response:
    """200 with one result per operation, in order: its status as a request of its own would
    have had, its outcome, and the record or the problem."""
    items: list[JsonObject] = []
    summary = dict.fromkeys(("created", "updated", "unchanged", "failed"), 0)
    for result in results:
        summary[result.outcome] += 1
        if result.error is not None:
            status, problem = domain_problem(request, result.error)
            items.append({"status": status, "outcome": "failed", "error": problem})
        else:
            assert result.record is not None, "a result without an error has its record"
            items.append(
                {
                    "status": _OUTCOME_STATUS[result.outcome],
                    "outcome": result.outcome,
                    "data": shape(result.record),
                }
            )
    body = {"results": items, "summary": summary}
    return Response(orjson.dumps(body), media_type="application/json")


def no_content() -> Response:
    return Response(status_code=204)
