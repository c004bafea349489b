"""Who is calling: credentials to a Scope, then admission under the rate limits, for both APIs.

Both run on the event loop: a cached key needs no thread and no database, and the shared
limiter is asked over an asynchronous Redis connection. The client address's allowance of failed
authentications is asked first, so a refused address's key is neither parsed nor looked up, and
spent only when authentication fails (``tenancy.failure_allowance``). The verdict stays on the
request for the RateLimit headers (``edge.request_edge``), whatever the answer.

A batch request counts by its size (``charge_batch``), which is known only once its route has
read the body: admission spends the first unit before, and the route the rest after.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import math
import types
import typing
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_validation_alias, request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import Json
from pydantic.fields import FieldInfo
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from dealbase.edge.request_edge import CALLER_STATE, EXCEPTION_HANDLERS
from dealbase.edge.route_index import CALLED_DIRECTLY
from dealbase.errors import Unauthenticated
from dealbase.tenancy.callers.authentication import Authenticator
from dealbase.tenancy.rate_limits.admission import VERDICT_STATE, Admission
from dealbase.tenancy.rate_limits.failure_allowance import FailureAllowance, client_address
from dealbase.tenancy.rate_limits.limiter import Verdict
from dealbase.tenancy.scope import Scope

# An Authenticator's method: (X-Api-Key, X-Department-Id) to a Scope, or Unauthenticated.
Authenticate = Callable[[str | None, str | None], Awaitable[Scope]]

# A batch counts as one request per this many of its operations, rounded up (docs/api.md).
OPERATIONS_PER_REQUEST = 100


class AdmittedRoute(APIRoute):
    """A route of the integration API: its caller is authenticated and admitted under the rate
    limits before FastAPI reads anything else of the request (a refused caller's parameters and
    body are never looked at), and its handler takes the Scope with ``caller_of``, not as a
    dependency, which FastAPI would resolve on every request at a cost of its own.

    Its optional query and header parameters (the lists' filters and page, If-Match,
    If-None-Match, Idempotency-Key) stay in its signature, where the OpenAPI document reads
    them, but are read by ``_reading_parameters``: FastAPI goes through every header
    and query parameter a request carries for them, even when none of them is sent, a cost
    every request of the route would pay.

    A route whose endpoint then takes nothing else but the request (no body parameter, no
    dependency: a create, a list, a read, a patch) is called without FastAPI's request handler and its wrapper
    (two exit stacks, a dependency solver, a second exception layer), which have nothing to do
    for it: its errors go to the app's exception handlers as any route's do.
    """

    # Whether a tenant-wide key is admitted too (``TenantWideRoute``).
    tenant_wide: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if _takes_only_the_request(self._served_dependant()):
            self.app = _answering(self.get_route_handler())
            setattr(self, CALLED_DIRECTLY, True)

    def _served_dependant(self) -> Dependant:
        """The dependant the route's handler serves: without its path parameters and optional
        query and header parameters where ``_reading_parameters`` reads them; the route keeps
        the whole one for the OpenAPI document."""
        declared = self.dependant
        optional = [*declared.header_params, *declared.query_params]
        if (
            (optional or declared.path_params)
            # Each None when not sent, as this reads them.
            and all(field.field_info.default is None for field in optional)
            and declared.request_param_name is not None
            and inspect.iscoroutinefunction(declared.call)
        ):
            return dataclasses.replace(
                declared,
                path_params=[],
                header_params=[],
                query_params=[],
                call=_reading_parameters(declared),
            )
        return declared

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        declared = self.dependant
        served = self._served_dependant()
        if _takes_only_the_request(served):
            assert served.call is not None
            assert served.request_param_name is not None
            handle = _called_with_the_request(served.call, served.request_param_name)
        else:
            self.dependant = served
            try:
                handle = super().get_route_handler()
            finally:
                self.dependant = declared

        admit = dashboard_scope if self.tenant_wide else department_scope

        async def admitted_first(request: Request) -> Response:
            await admit(request)
            return await handle(request)

        return admitted_first


class TenantWideRoute(AdmittedRoute):
    """A route of the integration API that a tenant-wide key may call as well as a department
    key (``dashboard_scope``): what belongs to the tenant rather than to a department."""

    tenant_wide = True


def _takes_only_the_request(dependant: Dependant) -> bool:
    return (
        dependant.request_param_name is not None
        and inspect.iscoroutinefunction(dependant.call)
        and not dependant.path_params
        and not dependant.query_params
        and not dependant.header_params
        and not dependant.cookie_params
        and not dependant.body_params
        and not dependant.dependencies
        and dependant.websocket_param_name is None
        and dependant.http_connection_param_name is None
        and dependant.response_param_name is None
        and dependant.background_tasks_param_name is None
        and dependant.security_scopes_param_name is None
    )


def _called_with_the_request(
    endpoint: Callable[..., Any], request_name: str
) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    async def handle(request: Request) -> Response:
        response = await endpoint(**{request_name: request})
        if not isinstance(response, Response):
            raise TypeError(f"{endpoint.__name__} must answer with a Response")
        return response

    return handle


def _answering(handle: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """The route's ASGI app: the request's answer from ``handle``, sent; an error ``handle``
    raises is answered by the app's handler of its kind (the exception layer's, which it put in
    the scope), as Starlette's own routes do, or raised when it has none."""

    async def app(scope: ASGIScope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await handle(request)
        except Exception as error:
            response = await _handled(request, error)
        await response(scope, receive, send)

    return app


async def _handled(request: Request, error: Exception) -> Response:
    """The answer of the app's handler of ``error`` (a status's own for an HTTPException, else
    the nearest of its classes'), or ``error`` raised again."""
    by_class, by_status = request.scope.get(EXCEPTION_HANDLERS, ({}, {}))
    handler = by_status.get(error.status_code) if isinstance(error, HTTPException) else None
    if handler is None:
        handler = next((by_class[kind] for kind in type(error).__mro__ if kind in by_class), None)
    if handler is None:
        raise error
    answer = handler(request, error)
    response: Response = await answer if inspect.isawaitable(answer) else answer
    # A raised error kept for reuse would keep each request's frames alive.
    error.__traceback__ = None
    return response


def _reading_parameters(declared: Dependant) -> Callable[..., Awaitable[Any]]:
    """The endpoint of ``declared``, given the values of its path, query and header parameters:
    None for an optional one the request does not send, else what FastAPI's own validation of
    it gives, its errors in FastAPI's order (path, query, headers) and a 422 as FastAPI's
    (``edge.problems``)."""
    endpoint = declared.call
    assert endpoint is not None
    assert declared.request_param_name is not None
    request_name = declared.request_param_name
    fields = _parameter_fields(declared)

    async def with_parameters(**values: Any) -> Any:
        request = values[request_name]
        errors: list[Any] = []
        for field, alias, where, one_value in fields:
            sent: Any = (
                request.path_params
                if where == 0
                else request.query_params
                if where == 1
                else request.headers
            )
            if where and sent.get(alias) is None:
                values[field.name] = None
                continue
            if one_value:
                # What request_params_to_args does for such a field, without walking every
                # header or query parameter of the request first, as it does for another kind
                # of field.
                value, wrong = field.validate(sent.get(alias), values, loc=(_WHERE[where], alias))
                values[field.name] = value
            else:
                found, wrong = request_params_to_args([field], sent)
                values[field.name] = found.get(field.name)
            errors += wrong
        if errors:
            raise RequestValidationError(errors)
        return await endpoint(**values)

    return with_parameters


_WHERE = ("path", "query", "header")


def _parameter_fields(declared: Dependant) -> list[tuple[Any, str, int, bool]]:
    """The endpoint's parameters in FastAPI's order, each as (field, name in the request,
    where: 0 path, 1 query, 2 headers, whether it is one value)."""
    return [
        *((field, field.alias, 0, _one_value(field.field_info)) for field in declared.path_params),
        *(
            (field, get_validation_alias(field), 1, _one_value(field.field_info))
            for field in declared.query_params
        ),
        *(
            (field, get_validation_alias(field), 2, _one_value(field.field_info))
            for field in declared.header_params
        ),
    ]


# The kinds of parameter a request gives as one text (alone, or optional): any other (a list, a
# model of several parameters, JSON, a literal) is read by FastAPI's own ``request_params_to_args``.
_ONE_TEXT_KINDS = (
    str,
    int,
    float,
    bool,
    uuid.UUID,
    datetime.date,
    datetime.datetime,
    decimal.Decimal,
    enum.Enum,
)


def _one_value(field_info: FieldInfo) -> bool:
    """Whether a parameter declared with ``field_info`` is one text of the request to validate."""
    annotation: Any = field_info.annotation
    kinds = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    return not any(type(item) is Json for item in field_info.metadata) and all(
        kind is types.NoneType or (isinstance(kind, type) and issubclass(kind, _ONE_TEXT_KINDS))
        for kind in kinds
    )


def caller_of(request: Request) -> Scope:
    """The Scope ``AdmittedRoute`` admitted for this request."""
    scope: Scope = getattr(request.state, CALLER_STATE)
    return scope


async def department_scope(request: Request) -> Scope:
    """The integration API's caller: a department key, admitted.

    The headers are read here, not through FastAPI's security dependencies, which would cost
    each request two more dependencies to resolve; the OpenAPI document declares them as its
    security schemes (``rest_api/openapi.py``).
    """
    authenticator: Authenticator = request.app.state.authenticator
    return await _authenticated(request, authenticator.department_scope)


async def dashboard_scope(request: Request) -> Scope:
    """The dashboards' caller: a department key, or a tenant-wide key without a department."""
    authenticator: Authenticator = request.app.state.authenticator
    return await _authenticated(request, authenticator.dashboard_scope)


async def _authenticated(request: Request, authenticate: Authenticate) -> Scope:
    failures: FailureAllowance = request.app.state.failure_allowance
    # The peer as uvicorn reports it: behind trusted proxies, the client they forwarded for.
    address = client_address(request.client.host if request.client is not None else None)
    limiter_answers = await failures.admit(address)
    headers = request.headers
    try:
        scope = await authenticate(headers.get("x-api-key"), headers.get("x-department-id"))
    except Unauthenticated:
        if limiter_answers:
            await failures.spend(address)
        raise
    # Known from here on, refused or not: the access line names the caller.
    setattr(request.state, CALLER_STATE, scope)
    admission: Admission = request.app.state.admission
    await admission.admit(
        scope,
        lambda verdict: setattr(request.state, VERDICT_STATE, verdict),
        limiter_answers=limiter_answers,
    )
    return scope


async def charge_batch(request: Request, scope: Scope, operations: int) -> None:
    """Charges an admitted batch of ``operations`` the rest of its cost, once its route has read
    the body and before it does anything: the batch costs ceil(operations / 100) requests, at
    most each limit's burst (else a key with a small burst could never send one), of which
    admission (``department_scope``) spent the first.

    Raises RateLimited (429, with Retry-After) when a limit refuses the rest, the first staying
    spent; Unavailable (503) when the limiter cannot answer and the service fails closed. The
    request's verdict becomes this charge's, so the RateLimit headers show the budgets after it.
    """
    cost = math.ceil(operations / OPERATIONS_PER_REQUEST)
    admitted: Verdict = getattr(request.state, VERDICT_STATE)
    # A verdict without buckets: the limiter did not answer this request's admission, which was
    # served failing open; it is not asked again, as admission does not ask it twice either.
    if cost <= 1 or not admitted.buckets:
        return
    admission: Admission = request.app.state.admission
    await admission.charge(
        scope, cost, lambda verdict: setattr(request.state, VERDICT_STATE, verdict)
    )
