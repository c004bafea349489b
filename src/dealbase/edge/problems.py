"""Every error leaves as ``application/problem+json`` (RFC 9457); the mapping lives here, once."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
import structlog
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from dealbase.errors import (
    BatchRejected,
    Conflict,
    DomainError,
    FieldError,
    Forbidden,
    Invalid,
    NotFound,
    PreconditionFailed,
    RateLimited,
    Unauthenticated,
    Unavailable,
    invalid_from_pydantic,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"
log = structlog.get_logger(__name__)

_DOMAIN_STATUS: dict[type[DomainError], int] = {
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PreconditionFailed: 412,
    Invalid: 422,
    BatchRejected: 422,
    RateLimited: 429,
    Unavailable: 503,
}


class ProtocolError(Exception):
    """A request the HTTP layer refuses before any domain rule is asked (400, 405, 413, 415),
    with the headers its answer needs (a 405's ``Allow``)."""

    def __init__(
        self,
        status: int,
        code: str,
        title: str,
        detail: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.title, self.detail = status, code, title, detail
        self.headers = headers


def malformed_json(detail: str) -> ProtocolError:
    return ProtocolError(400, "malformed_json", "Malformed JSON", detail)


def problem_document(
    status: int, code: str, title: str, detail: str, request_id: str
) -> dict[str, Any]:
    """The members every problem carries, whether the app answers it or the HTTP server does
    before any app sees the request (deploy/'s proxy writes the same members)."""
    return {
        "type": f"/problems/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "request_id": request_id,
    }


def problem_body(
    request: Request,
    status: int,
    code: str,
    title: str,
    detail: str,
    *,
    errors: tuple[FieldError, ...] | None = None,
    members: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A problem details object; ``members`` are extension members (RFC 9457 section 3.2)
    beside the standard ones."""
    body = problem_document(status, code, title, detail, getattr(request.state, "request_id", ""))
    if errors is not None:
        body["errors"] = [
            {"field": e.field, "pointer": e.pointer, "code": e.code, "message": e.message}
            for e in errors
        ]
    if members is not None:
        body.update(members)
    return body


def problem(
    request: Request,
    status: int,
    code: str,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An ``application/problem+json`` response of the standard members."""
    return problem_response(status, problem_body(request, status, code, title, detail), headers)


def problem_response(
    status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> Response:
    """``body`` (``problem_body``'s) as an ``application/problem+json`` response."""
    return Response(orjson.dumps(body), status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def domain_problem(request: Request, error: DomainError) -> tuple[int, dict[str, Any]]:
    """A DomainError's status and problem details object: a response's, or one operation's in a
    batch."""
    status = _status_of(error)
    errors = error.errors if isinstance(error, Invalid) else None
    members = None
    if isinstance(error, BatchRejected):
        members = {
            "failures": [
                {"index": index, "error": domain_problem(request, failure)[1]}
                for index, failure in error.failures
            ]
        }
    body = problem_body(
        request, status, error.code, error.title, error.detail, errors=errors, members=members
    )
    return status, body


def _status_of(error: DomainError) -> int:
    for kind in type(error).__mro__:
        if kind in _DOMAIN_STATUS:
            return _DOMAIN_STATUS[kind]
    return 400


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    headers = None
    if isinstance(exc, RateLimited | Unavailable) and exc.retry_after_seconds is not None:
        headers = {"Retry-After": str(exc.retry_after_seconds)}
    status, body = domain_problem(request, exc)
    return problem_response(status, body, headers)


async def _protocol_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProtocolError)
    return problem(request, exc.status, exc.code, exc.title, exc.detail, headers=exc.headers)


async def _request_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    # A literal path that a parameter's path also matches (POST /customers/batch, GET sent to
    # it): the literal one is meant, and it lacks the method.
    if errors and all(error["loc"][0] == "path" for error in errors):
        if request.url.path in request.app.openapi().get("paths", {}):
            return _method_not_allowed(request)
        # An id in the path that cannot exist answers like any unknown id.
        return problem(request, 404, "not_found", "Not found", "No resource has that id.")
    # Name query and header parameters as clients know them: "limit", not "query.limit".
    for error in errors:
        if error["loc"] and error["loc"][0] in ("query", "header", "body"):
            error["loc"] = error["loc"][1:]
    invalid = invalid_from_pydantic(errors)
    body = problem_body(
        request, 422, invalid.code, invalid.title, invalid.detail, errors=invalid.errors
    )
    return problem_response(422, body)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    title = code.replace("_", " ").capitalize()
    detail = exc.detail if isinstance(exc.detail, str) else title
    headers = exc.headers
    if exc.status_code == 404:
        detail = "No resource exists at this path."
    if exc.status_code == 405:
        return _method_not_allowed(request)
    return problem(request, exc.status_code, code, title, detail, headers=headers)


def _method_not_allowed(request: Request) -> Response:
    allowed = _methods_at(request)
    return problem(
        request,
        405,
        "method_not_allowed",
        "Method not allowed",
        f"This path allows {', '.join(allowed)}.",
        headers={"Allow": ", ".join(allowed)},
    )


def _methods_at(request: Request) -> list[str]:
    """Every method the OpenAPI document gives this path (Starlette names one route's only); a
    literal path (``/customers/batch``) is that path only, not also ``/customers/{id}``. A path
    the document leaves out (``/graphql``, ``/healthz``, ``/openapi.json``): its routes'
    methods. ``HEAD`` wherever ``GET`` is (the request edge answers it)."""
    paths = request.app.openapi().get("paths", {})
    literal = paths.get(request.url.path)
    methods: set[str] = set()
    if literal is not None:
        methods = {method.upper() for method in literal}
    else:
        for template, operations in paths.items():
            if re.fullmatch(
                re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)), request.url.path
            ):
                methods |= {method.upper() for method in operations}
    if not methods:
        for route in request.app.router.routes:
            if route.matches(request.scope)[0] is Match.PARTIAL:
                methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


# nginx's status for a request its client closed before the answer: nothing is sent (the client
# is gone), but the access line and the metrics show it apart from the server's failures.
CLIENT_CLOSED_REQUEST = 499


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    log.info("client_disconnected")
    return Response(status_code=CLIENT_CLOSED_REQUEST)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled_error", exc_info=exc)
    # Starlette answers this outside our request-context middleware, so the id goes on here.
    request_id = getattr(request.state, "request_id", "")
    return problem(
        request,
        500,
        "internal_error",
        "Internal error",
        "The server failed; the request id identifies this failure to support.",
        headers={"X-Request-Id": request_id},
    )


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(ProtocolError, _protocol_error)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_disconnected)
    app.add_exception_handler(Exception, _unexpected)
