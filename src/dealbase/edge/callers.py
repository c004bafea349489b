"""Who is calling: credentials to a Scope, then admission under the rate limits, for both APIs.

Both run on the event loop: a cached key needs no thread and no database, and the shared
limiter is asked over an asynchronous Redis connection. The verdict stays on the request for
the RateLimit headers (``edge.rate_limit_headers``), whatever the answer.
"""

from __future__ import annotations

from fastapi import Request

from dealbase.edge.request_context import CALLER_STATE
from dealbase.tenancy.admission import VERDICT_STATE, Admission
from dealbase.tenancy.authentication import Authenticator
from dealbase.tenancy.scope import Scope


async def department_scope(request: Request) -> Scope:
    """The integration API's caller: a department key, admitted.

    The headers are read here, not through FastAPI's security dependencies, which would cost
    each request two more dependencies to resolve; the OpenAPI document declares them as its
    security schemes (``rest_api/openapi.py``).
    """
    headers = request.headers
    authenticator: Authenticator = request.app.state.authenticator
    scope = await authenticator.department_scope(
        headers.get("x-api-key"), headers.get("x-department-id")
    )
    return await _admitted(request, scope)


async def dashboard_scope(request: Request) -> Scope:
    """The dashboards' caller: a department key, or a tenant-wide key without a department."""
    authenticator: Authenticator = request.app.state.authenticator
    scope = await authenticator.dashboard_scope(
        request.headers.get("x-api-key"), request.headers.get("x-department-id")
    )
    return await _admitted(request, scope)


async def _admitted(request: Request, scope: Scope) -> Scope:
    # Known from here on, refused or not: the access line names the caller.
    setattr(request.state, CALLER_STATE, scope)
    admission: Admission = request.app.state.admission
    await admission.admit(scope, lambda verdict: setattr(request.state, VERDICT_STATE, verdict))
    return scope
