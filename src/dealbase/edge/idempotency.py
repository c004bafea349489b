"""Runs a creating request at most once per Idempotency-Key (platform.idempotency stores it)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.edge.database import database_of
from dealbase.edge.requests import idempotency_key
from dealbase.platform.idempotency import service as idempotency
from dealbase.platform.idempotency.models import StoredResponse
from dealbase.tenancy.scope import Scope


def _fingerprint(request: Request, body: BaseModel | None) -> bytes:
    """The request as validated (so key order and white space do not matter), and its target
    with its query (a batch's ``atomic``); a request that takes no body is its target alone."""
    query = f"?{request.url.query}" if request.url.query else ""
    target = f"{request.method} {request.url.path}{query}\n".encode()
    validated = b"" if body is None else body.model_dump_json().encode()
    return hashlib.sha256(target + validated).digest()


async def run_once(
    request: Request,
    scope: Scope,
    idempotency_key_header: str | None,
    body: BaseModel | None,
    perform: Callable[[UnitOfWork], Response | AfterCommit[Response]],
) -> Response:
    """``perform`` in one unit of work; with a key, at most once, its response replayed after.
    ``body``: the validated body, or None for a request that takes none (its path says it all).
    A response ``perform`` gives after commit is read before it with a key (it is stored in
    the same transaction)."""
    db = database_of(request)
    key = idempotency_key(idempotency_key_header)
    if key is None:
        return await db.run(scope, perform)
    fingerprint = _fingerprint(request, body)

    def once(uow: UnitOfWork) -> Response:
        stored = idempotency.begin(uow, key, fingerprint)
        if stored is not None:
            return _replay(stored)
        performed = perform(uow)
        response = performed.read() if isinstance(performed, AfterCommit) else performed
        idempotency.finish(
            uow,
            key,
            fingerprint,
            StoredResponse(
                response.status_code, bytes(response.body), response.headers.get("location")
            ),
        )
        return response

    return await db.run(scope, once)


def _replay(stored: StoredResponse) -> Response:
    headers = {"Idempotent-Replayed": "true"}
    if stored.location is not None:
        headers["Location"] = stored.location
    return Response(stored.body, stored.status, headers=headers, media_type="application/json")
