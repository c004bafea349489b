"""Who opens a live connection (a WebSocket, or a stream of server-sent events), and whether the
key may still hold it.

A browser cannot set headers on a WebSocket, so its credentials may come in the protocol's first
message instead: the key and department are then given here rather than read from the headers.
Otherwise a live connection is admitted exactly as a GraphQL request is: the client address's
allowance of failed authentications first, the key (department keys, and tenant-wide keys that
name their department per subscription), then the rate limits, charged once for the connection
(each WebSocket ``subscribe``, and each board after a subscription's first, are charged besides:
``graphql_api.live``).
"""

from __future__ import annotations

from anyio import to_thread
from starlette.requests import HTTPConnection

from dealbase.db.database import Database
from dealbase.errors import Unauthenticated
from dealbase.tenancy.callers.api_keys import (
    AUTHENTICATION_FAILED,
    load_credentials,
    parse_api_key,
    scope_for_request,
)
from dealbase.tenancy.callers.authentication import Authenticator
from dealbase.tenancy.rate_limits.admission import Admission
from dealbase.tenancy.rate_limits.failure_allowance import FailureAllowance, client_address
from dealbase.tenancy.scope import Scope


async def live_scope(
    connection: HTTPConnection, api_key: str | None, department_header: str | None
) -> Scope:
    """The Scope of a live connection's caller, admitted under the rate limits; raises what a
    GraphQL request's authentication raises (Unauthenticated, Forbidden, TenantSuspended,
    RateLimited, Unavailable)."""
    state = connection.app.state
    failures: FailureAllowance = state.failure_allowance
    address = client_address(connection.client.host if connection.client is not None else None)
    limiter_answers = await failures.admit(address)
    authenticator: Authenticator = state.authenticator
    try:
        scope = await authenticator.dashboard_scope(api_key, department_header)
    except Unauthenticated:
        if limiter_answers:
            await failures.spend(address)
        raise
    admission: Admission = state.admission
    await admission.admit(scope, lambda verdict: None, limiter_answers=limiter_answers)
    return scope


async def still_admitted(
    database: Database, api_key: str | None, department_header: str | None
) -> None:
    """Raises as authentication would when the key, read again from the database (not from
    the process's key cache, which may not have heard of the change yet), no longer admits the
    caller: revoked, expired, its tenant suspended or deleted."""
    parsed = parse_api_key(api_key)
    if parsed is None:
        raise Unauthenticated(AUTHENTICATION_FAILED)
    key_id, secret = parsed

    def load() -> None:
        with database.control() as control:
            credentials = load_credentials(control, key_id)
        scope_for_request(credentials, secret, department_header, tenant_wide_allowed=True)

    await to_thread.run_sync(load)
