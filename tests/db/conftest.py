"""The fixtures of ``tests/db``'s values round trips and refusals (``values_support.py``)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.db.values_support import Department
from tests.support import Credentials, TenantWorld, build_tenant


@pytest.fixture(scope="module")
def tenant(database: Database) -> TenantWorld:
    """One tenant for the module: each test writes in a department of its own."""
    return build_tenant(database)


@pytest.fixture
def department(client: TestClient, database: Database, tenant: TenantWorld) -> Department:
    made = admin.create_department(database, tenant.tenant.id, "Round trips")
    issued = admin.issue_key(database, tenant.tenant.id, made.id, "round trips")
    return Department(client, Credentials(issued.key_id, issued.api_key, made.id).headers)
