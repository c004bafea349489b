"""Building successful responses from domain objects through their wire models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from dealbase.platform.pagination import Page

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


def created(model: type[BaseModel], value: object, location: str) -> Response:
    response = json_response(model, value, 201)
    response.headers["Location"] = API_PREFIX + location
    return response


def page_response(model: type[BaseModel], page: Page[Any]) -> Response:
    return json_response(model, {"data": page.items, "next_cursor": page.next_cursor})


def no_content() -> Response:
    return Response(status_code=204)
