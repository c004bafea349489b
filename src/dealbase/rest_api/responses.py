"""Building successful responses from domain objects through their wire models."""

from __future__ import annotations

from pydantic import BaseModel
from starlette.responses import Response

API_PREFIX = "/api/v1/integration"


def json_response(model: type[BaseModel], value: object, status: int = 200) -> Response:
    return Response(
        model.model_validate(value).model_dump_json(), status, media_type="application/json"
    )


def created(model: type[BaseModel], value: object, location: str) -> Response:
    response = json_response(model, value, 201)
    response.headers["Location"] = API_PREFIX + location
    return response
