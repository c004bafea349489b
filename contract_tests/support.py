"""What the contract suite shares: its schemathesis settings, the document, and the app seat.

schemathesis 4.32's fixture-based loader (``schemathesis.pytest.from_fixture``) reads
``Function._nodeid``, which pytest 9 removed, so the schema is built at import time instead
(``schema.parametrize()`` on a real schema works on pytest 9). The app it calls needs the session
database, which exists only once fixtures run; ``SESSION_APP`` is the seat the ``contract_app``
fixture puts the real app in.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import schemathesis
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from dealbase.app import create_app
from dealbase.config import Settings
from tests.depth import DEPTH

OPENAPI_PATH = "/openapi.json"

# Whether each (table, id) given is a row of the contract tenant (the ``rows_exist`` fixture).
RowsExist = Callable[..., tuple[bool, ...]]

# A fixed seed: a CI failure reproduces by rerunning the same commit.
SEED = 20_240_601

# The document does not depend on the database, and building the app does not connect to one
# (only its lifespan does), so an unroutable URL is enough to read /openapi.json at import time.
_DOCUMENT_ONLY_DATABASE_URL = "postgresql://contract-document.invalid/none"


REQUEST_GIVE_UP_SECONDS = 300


def contract_config() -> schemathesis.Config:
    """Every default check, bounded generation, reproducible runs."""
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            # schemathesis gives a call up after 10 s unless told otherwise: a bound on the
            # machine's speed, which a batch of 1,000 operations passed on a busy machine. The
            # contract is the answer, not how soon it comes (bench/ measures that): only a hang
            # reaches this.
            "request-timeout": REQUEST_GIVE_UP_SECONDS,
            "generation": {
                "max-examples": DEPTH.examples_per_operation,
                # No example database: a run depends on the seed alone, not on earlier runs.
                "database": "none",
                # The suite sends a real tenant's X-Api-Key and X-Department-Id with every call.
                # Generated ones would be labelled by what was generated (say, "missing
                # X-Api-Key") while the real ones are sent, so a case negative only in them would
                # be judged negative though valid. Authentication is still tested: the
                # ignored-auth check replays calls without, and with wrong, credentials.
                "with-security-parameters": False,
            },
        }
    )


def served_document(app: ASGIApp) -> dict[str, Any]:
    """``/openapi.json`` as ``app`` serves it (without running its lifespan, which needs a DB)."""
    response = TestClient(app).get(OPENAPI_PATH)
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def import_time_document() -> dict[str, Any]:
    settings = Settings(database_url=_DOCUMENT_ONLY_DATABASE_URL, log_level="warning")
    return served_document(create_app(settings))


class AppSeat:
    """An ASGI app that forwards requests to whichever app is seated, and keeps its lifespan out.

    schemathesis's pytest plugin starts an app's lifespan on the first request of each test and
    shuts it down after the test; dealbase's lifespan starts a key-listener thread, which cannot
    start twice. The seated app's lifespan is therefore run once, by the ``contract_app`` fixture,
    and the lifespan schemathesis drives here is answered without reaching it.
    """

    def __init__(self) -> None:
        self._app: ASGIApp | None = None

    def seat(self, app: ASGIApp) -> None:
        self._app = app

    def vacate(self) -> None:
        self._app = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _acknowledge_lifespan(receive, send)
            return
        if self._app is None:
            raise RuntimeError("no app is seated: request the contract_app fixture")
        await self._app(scope, receive, send)


async def _acknowledge_lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


SESSION_APP = AppSeat()


def load_schema(document: dict[str, Any]) -> schemathesis.BaseSchema:
    """``document`` as a schemathesis schema whose requests go in-process to the seated app.
    schemathesis gets a copy: its stateful phase adds the links it infers to the document it
    holds, which a test reading ``document`` after it would see (as the links' own test did,
    run after it by the same worker)."""
    schema = schemathesis.openapi.from_dict(copy.deepcopy(document), config=contract_config())
    schema.app = SESSION_APP
    schema.location = OPENAPI_PATH
    return schema
