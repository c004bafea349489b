"""Fixtures of the GraphQL tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings


@pytest.fixture(scope="session")
def resolvers_only(settings: Settings) -> Iterator[TestClient]:
    """The service with every GraphQL field answered by the resolvers (no compiled reads)."""
    app = create_app(settings.model_copy(update={"graphql_compiled_reads": False}))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
