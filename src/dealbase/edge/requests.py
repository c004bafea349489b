"""Reading a request: its JSON body and the headers that condition a write (If-Match,
Idempotency-Key)."""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Any, TypeVar

from fastapi import Header, Request
from pydantic import BaseModel, ValidationError

from dealbase.edge.problems import ProtocolError, malformed_json
from dealbase.errors import invalid_from_pydantic
from dealbase.platform.idempotency.models import MAX_KEY_LENGTH
from dealbase.platform.versioning import Expected

# The conditional headers are declared as route parameters (the OpenAPI document shows them;
# ``AdmittedRoute`` reads them, validated by these fields when sent), not as dependencies: a
# dependency costs every request that names it a pass of FastAPI's resolver
# (docs/architecture.md).
CONDITION_MAX_LENGTH = 1024

IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        max_length=CONDITION_MAX_LENGTH,
        description="Apply only if the resource's ETag is one of these (or `*`); else 412.",
    ),
]

IfNoneMatch = Annotated[
    str | None,
    Header(
        alias="If-None-Match",
        max_length=CONDITION_MAX_LENGTH,
        description="`*`: create only, 412 when the record exists; ETags: 412 when the record"
        " is at one of them.",
    ),
]

# 1 to MAX_KEY_LENGTH printable ASCII characters, optionally as a structured-field string ("...").
IDEMPOTENCY_KEY_PATTERN = (
    rf'^[\x20-\x7e]{{1,{MAX_KEY_LENGTH}}}$|^"[\x20-\x7e]{{1,{MAX_KEY_LENGTH}}}"$'
)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Makes a retry safe: the same key with the same body within 24 hours returns the"
            " first response again, with `Idempotent-Replayed: true`, and writes nothing."
        ),
    ),
]


def expected_version(if_match: str | None) -> Expected | None:
    """The versions an If-Match header admits. Weak tags never match (RFC 9110 strong
    comparison), so a list of only those admits nothing and yields 412."""
    if if_match is None:
        return None
    if if_match.strip() == "*":
        return Expected(None)
    versions = set()
    for tag in if_match.split(","):
        opaque = tag.strip()[1:-1] if tag.strip()[:1] == tag.strip()[-1:] == '"' else ""
        # Our ETags are quoted version numbers; anything else can match no version.
        if opaque.isascii() and opaque.isdigit() and len(opaque) <= 18:
            versions.add(int(opaque))
    return Expected(frozenset(versions))


def idempotency_key(header: str | None) -> str | None:
    """The key, also in the draft's structured-field form (a quoted string)."""
    if header is not None and len(header) >= 2 and header[0] == header[-1] == '"':
        return header[1:-1]
    return header


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media_type, _, parameters = content_type.partition(";")
    media_type = media_type.strip().lower()
    if media_type != "application/json" and not (
        media_type.startswith("application/") and media_type.endswith("+json")
    ):
        return False
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            return False
    return True


async def json_body(request: Request) -> bytes:
    """The raw body of a JSON request: 415 for another media type (the request edge has
    refused bodies past 1 MiB already)."""
    if not _is_json(request.headers.get("content-type")):
        raise ProtocolError(
            415,
            "unsupported_media_type",
            "Unsupported media type",
            "Send the body as JSON with Content-Type: application/json.",
        )
    return await request.body()


M = TypeVar("M", bound=BaseModel)


def _refuse_constant(name: str) -> Any:
    raise malformed_json(f"The body is not valid JSON: {name} is not a JSON value.")


def parse_body(model: type[M], body: bytes) -> M:
    """Validates the JSON text strictly: no coercion of strings to numbers or floats to integers,
    and no ``NaN`` or ``Infinity``, which JSON does not have (pydantic's parser takes them)."""
    if not body.strip():
        raise malformed_json("The request body is empty; send a JSON object.")
    if b"NaN" in body or b"Infinity" in body:
        # Perhaps only inside a string: the standard parser tells, calling back for a constant.
        # Not JSON at all: pydantic says why, below.
        with contextlib.suppress(json.JSONDecodeError):
            json.loads(body, parse_constant=_refuse_constant)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        for error in errors:
            if error["type"] == "json_invalid":
                raise malformed_json(f"The body is not valid JSON: {error['msg']}.") from None
        raise invalid_from_pydantic(errors) from None
