"""How a tenant's unit of work commits on the cluster (the commands the coordinator sends the
worker, as Citus logs them). One that wakes the webhook worker writes the tenant's rows on its
worker and the wakeup's row in ``control`` on the coordinator, and Citus commits the two in one
phase: the worker's COMMIT, then the coordinator's own, no PREPARE TRANSACTION. A customer's
create, three statements in one round trip, is one transaction on the worker, and a unit of
work whose later statement fails leaves nothing of its earlier ones there (Citus commits a
statement sent outside a transaction block as it ends: several go inside one)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import func, insert, select

from dealbase.db.database import Database
from dealbase.ids import new_id
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.tables import customers as customers_table
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from tests.citus.conftest import forget_wakeups, wakeups
from tests.support import TenantWorld


@pytest.fixture
def logged(citus_url: str) -> Iterator[tuple[Database, list[str]]]:
    """A database of one connection, which logs the commands the coordinator sends the
    workers: the notices it got meanwhile."""
    database = Database(citus_url, pool_size=1, max_overflow=0, distributed_schemas=True)
    notices: list[str] = []
    with database.pool.connection() as connection:
        connection.execute("SET citus.log_remote_commands = on")
        connection.execute("SET client_min_messages = log")
        connection.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    yield database, notices
    database.dispose()


def _transaction_commands(notices: list[str]) -> list[str]:
    """How the worker's transaction began and ended (BEGIN, COMMIT or PREPARE TRANSACTION...)."""
    kinds = ("BEGIN", "COMMIT", "PREPARE TRANSACTION", "COMMIT PREPARED")
    issued = [each.removeprefix("issuing ") for each in notices]
    return [
        max((kind for kind in kinds if each.startswith(kind)), key=len)
        for each in issued
        if each.startswith(kinds)
    ]


def test_a_write_that_wakes_the_webhook_worker_commits_in_one_phase(
    logged: tuple[Database, list[str]], cluster_world: TenantWorld, citus_url: str
) -> None:
    database, notices = logged
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    with database.unit_of_work(scope) as uow:
        endpoint = endpoints.create(
            uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
        )
    woken = wakeups(citus_url, scope.schema)

    notices.clear()
    try:
        with database.unit_of_work(scope) as uow:
            deliveries.send_test(uow, endpoint.id)

        assert any("webhook_deliveries" in each for each in notices), notices
        assert _transaction_commands(notices) == ["BEGIN", "COMMIT"], "\n".join(notices)
        assert wakeups(citus_url, scope.schema) == woken + 1
    finally:
        forget_wakeups(citus_url, scope.schema)


def test_a_customers_create_is_one_transaction_on_its_worker(
    logged: tuple[Database, list[str]], cluster_world: TenantWorld
) -> None:
    database, notices = logged
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    with database.unit_of_work(scope) as uow:
        customers.create(uow, CustomerFields(last_name="Lovelace"))

    sent = [each for each in notices if " INTO " in each or "SELECT (EXISTS" in each]
    assert len(sent) == 3, notices
    assert _transaction_commands(notices) == ["BEGIN", "COMMIT"], "\n".join(notices)


def test_a_unit_of_work_whose_second_statement_fails_leaves_nothing_on_the_worker(
    cluster_database: Database, cluster_world: TenantWorld
) -> None:
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    customer_id = new_id()
    row = {"id": customer_id, "department_id": cluster_world.department.id, "last_name": "Twice"}
    statement = insert(customers_table).values(created_at=func.now(), updated_at=func.now())

    def insert_twice() -> None:
        with cluster_database.unit_of_work(scope) as uow:
            uow.connection.defer(statement, row)
            uow.connection.defer(statement, row)

    with pytest.raises(psycopg.errors.UniqueViolation):
        insert_twice()

    with cluster_database.unit_of_work(scope) as uow:
        found = uow.connection.execute(
            select(func.count()).where(customers_table.c.id == customer_id)
        ).scalar_one()
    assert found == 0
