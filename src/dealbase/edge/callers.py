"""Who is calling: credentials to a Scope, then admission under the rate limits, for both APIs.

Both run on the event loop: a cached key needs no thread and no database, and the shared
limiter is asked over an asynchronous Redis connection. The verdict stays on the request for
the RateLimit headers (``edge.rate_limit_headers``), whatever the answer.
"""

from __future__ import annotations

from fastapi import Request, Security
from fastapi.security import APIKeyHeader

from dealbase.tenancy.admission import VERDICT_STATE, Admission
from dealbase.tenancy.authentication import Authenticator
from dealbase.tenancy.scope import Scope

api_key_header = APIKeyHeader(
    name="X-Api-Key",
    scheme_name="ApiKey",
    description="The integration's secret, as issued by `dealbase key issue`.",
    auto_error=False,
)
department_header = APIKeyHeader(
    name="X-Department-Id",
    scheme_name="DepartmentId",
    description="The id of the department the key was issued for.",
    auto_error=False,
)


async def department_scope(
    request: Request,
    api_key: str | None = Security(api_key_header),
    department: str | None = Security(department_header),
) -> Scope:
    """The integration API's caller: a department key, admitted."""
    authenticator: Authenticator = request.app.state.authenticator
    return await _admitted(request, await authenticator.department_scope(api_key, department))


async def dashboard_scope(request: Request) -> Scope:
    """The dashboards' caller: a department key, or a tenant-wide key without a department."""
    authenticator: Authenticator = request.app.state.authenticator
    scope = await authenticator.dashboard_scope(
        request.headers.get("x-api-key"), request.headers.get("x-department-id")
    )
    return await _admitted(request, scope)


async def _admitted(request: Request, scope: Scope) -> Scope:
    admission: Admission = request.app.state.admission
    await admission.admit(scope, lambda verdict: setattr(request.state, VERDICT_STATE, verdict))
    return scope
