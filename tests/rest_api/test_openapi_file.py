"""The committed openapi.json is the document the service serves: integrations are generated
from the file, so it must never drift from /openapi.json."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

COMMITTED = Path(__file__).parents[2] / "openapi.json"


def test_openapi_json_is_the_served_document(client: TestClient) -> None:
    served = client.get("/openapi.json").json()

    assert json.loads(COMMITTED.read_text()) == served, (
        "openapi.json is stale: run `dealbase openapi > openapi.json`"
    )


def test_openapi_json_is_openapi_3_1(client: TestClient) -> None:
    assert json.loads(COMMITTED.read_text())["openapi"].startswith("3.1")
