"""A webhook endpoint's create on a distributed schema: two statements routed whole to the
tenant's worker (the INSERT, then the UPDATE of its start), where a single server runs one.
Its delivery starts with the department's next event, as there, and it commits on the worker in
one phase (an intermediate result on the coordinator made it two)."""

from __future__ import annotations

import uuid

import psycopg

from dealbase.db.database import Database
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.tenancy.scope import Scope
from tests.citus.test_commits import _transaction_commands, logged
from tests.support import TenantWorld

__all__ = ["logged"]  # the fixture, for this module's tests


def _create(database: Database, scope: Scope) -> uuid.UUID:
    # Disabled: the department's writes then wake no worker (no wakeup is left behind).
    fields = WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"], enabled=False)
    with database.unit_of_work(scope) as uow:
        return endpoints.create(uow, Checked(fields)).id


def _start(citus_url: str, schema: str, endpoint_id: uuid.UUID) -> int:
    with psycopg.connect(citus_url) as connection:
        row = connection.execute(
            f'SELECT scanned_position FROM "{schema}".webhook_endpoints WHERE id = %s',
            [endpoint_id],
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_endpoints_create_commits_on_its_worker_in_one_phase(
    logged: tuple[Database, list[str]], cluster_world: TenantWorld
) -> None:
    database, notices = logged
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)

    _create(database, scope)

    written = [each for each in notices if "webhook_endpoints" in each]
    assert [each.split()[1] for each in written] == ["INSERT", "UPDATE"], notices
    assert _transaction_commands(notices) == ["BEGIN", "COMMIT"], "\n".join(notices)


def test_an_endpoint_starts_after_the_events_committed_before_it(
    cluster_database: Database, cluster_world: TenantWorld, citus_url: str
) -> None:
    scope = cluster_world.tenant.scope.in_department(cluster_world.department.id)
    schema = scope.schema
    # A department with no event yet has no position: the endpoint starts at 0.
    assert _start(citus_url, schema, _create(cluster_database, scope)) == 0

    for name in ("Lovelace", "Hopper", "Turing"):
        with cluster_database.unit_of_work(scope) as uow:
            customers.create(uow, CustomerFields(last_name=name))

    # The create numbers the three (none was yet) and starts past them.
    assert _start(citus_url, schema, _create(cluster_database, scope)) == 3
