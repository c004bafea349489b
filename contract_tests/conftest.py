"""Fixtures for the contract suite: the real app on a real database, and a real tenant's key.

The database fixtures are the ones ``tests/conftest.py`` defines, imported rather than copied so
both suites get their database the same way (and both fail, not skip, under ``CI=true`` without
one).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Table, exists, select

from contract_tests.server_rules import DepartmentRows
from contract_tests.support import SESSION_APP, RowsExist
from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.platform.tables import customers, deals
from tests.conftest import database, database_url, postgres_server, settings
from tests.support import Credentials, TenantWorld, build_tenant

INTEGRATION = "/api/v1/integration"

# pytest finds fixtures by name in a conftest module; listing them keeps the imports "used".
__all__ = [
    "contract_app",
    "contract_credentials",
    "contract_rows",
    "contract_world",
    "database",
    "database_url",
    "postgres_server",
    "rows_exist",
    "settings",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `make test` runs its serial pass on tests/ alone: a contract test marked serial would
    # never run there.
    here = Path(__file__).parent
    serial = [
        item.nodeid
        for item in items
        if here in item.path.parents and item.get_closest_marker("serial")
    ]
    if serial:
        raise pytest.UsageError(
            f"contract tests run in the parallel pass only, but these are marked serial: {serial}"
        )


@pytest.fixture(scope="session")
def contract_app(settings: Settings) -> Iterator[FastAPI]:
    """The app on the session database, seated where the suite's schemas send their requests."""
    app = create_app(settings)
    # The lifespan (key listener, connection pool) runs here, once for the session; see AppSeat.
    with TestClient(app):
        SESSION_APP.seat(app)
        yield app
        SESSION_APP.vacate()


@pytest.fixture(scope="session")
def contract_world(database: Database) -> TenantWorld:
    """A real tenant with one department, made the way an operator makes one."""
    return build_tenant(database)


@pytest.fixture(scope="session")
def contract_credentials(contract_world: TenantWorld) -> Credentials:
    """The department's key, issued the way an operator issues one."""
    return contract_world.key


@pytest.fixture(scope="session")
def rows_exist(database: Database, contract_world: TenantWorld) -> RowsExist:
    """Asked before every generated case (a case may have deleted a row the next one names):
    one statement, rather than a request through the app for each row."""

    def exist(*rows: tuple[Table, str]) -> tuple[bool, ...]:
        with database.unit_of_work(contract_world.tenant.scope) as uow:
            found = uow.connection.execute(
                select(*(exists().where(table.c.id == uuid.UUID(row_id)) for table, row_id in rows))
            ).one()
        return tuple(bool(each) for each in found)

    return exist


@pytest.fixture(scope="session")
def contract_rows(
    contract_app: FastAPI,
    contract_world: TenantWorld,
    contract_credentials: Credentials,
    database: Database,
    rows_exist: RowsExist,
) -> Callable[[], DepartmentRows]:
    """Real customer, deal, employee and step of the department, for bodies that name one.

    Made through the API (customer, deal) and the operator workflow (employee), so they are rows
    the server itself wrote. The stateful phase follows links out of list responses and can
    delete the customer or the deal, so each call makes a new one when its row is gone.
    """
    employee = admin.create_employee(
        database, contract_world.tenant.id, contract_credentials.department_id, "Eve Contract", None
    )
    client = TestClient(contract_app)  # the lifespan already runs, in contract_app
    headers = contract_credentials.headers

    def created(collection: str, body: dict[str, object]) -> str:
        response = client.post(f"{INTEGRATION}/{collection}", json=body, headers=headers)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    steps = client.get(f"{INTEGRATION}/steps", headers=headers)
    assert steps.status_code == 200, steps.text
    rows = DepartmentRows(
        customer_id=created("customers", {"last_name": "Lovelace"}),
        deal_id=created("deals", {"name": "Analytical engine"}),
        employee_id=str(employee.id),
        step_id=str(steps.json()["data"][0]["id"]),
    )

    def current() -> DepartmentRows:
        nonlocal rows
        customer, deal = rows_exist((customers, rows.customer_id), (deals, rows.deal_id))
        if not customer:
            rows = replace(rows, customer_id=created("customers", {"last_name": "Lovelace"}))
        if not deal:
            rows = replace(rows, deal_id=created("deals", {"name": "Analytical engine"}))
        return rows

    return current
