"""A query costs a fixed number of SQL statements whatever its page size: nested fields are
batched by the request's DataLoaders, never loaded once per parent."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.ops.admin import create_employee
from dealbase.platform.activities import service as activities_service
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.deals import service as deals_service
from dealbase.platform.deals.models import DealCreate, DealPatch
from dealbase.platform.validation import validated
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks.delivery_models import Response
from dealbase.tenancy.scope import Scope
from tests.delivery_support import lease, record_all
from tests.graphql_api.support import data_of
from tests.support import TenantWorld, build_tenant

DEALS = 120
KEY_USES_WRITE = re.compile(r"^UPDATE \S*api_keys SET last_used_at", re.IGNORECASE)
# A compiled read's choice of its generic plan, before it and back after (``reads.service``):
# settings of the transaction in the read's round trip, which read nothing.
PLAN_SETTING = re.compile(r"^SELECT (previous\.\*, )?set_config\('plan_cache_mode', ")
PAGE_SIZES = (5, 50, 100)

DEALS_QUERY = """
query($first: Int!) {
  deals(first: $first) {
    edges { node {
      id
      customers { id lastName }
      step { name }
      employee { name }
      activities { id }
    } }
  }
}
"""

CUSTOMERS_QUERY = """
query($first: Int!) {
  customers(first: $first) {
    edges { node { id deals { id } activities { id } } }
  }
}
"""


@dataclass
class StatementCounter:
    """Counts the statements the app sends while ``counting`` is on: those of its units of work
    and those of its SQLAlchemy engine (the control schema).

    The once-a-minute write of the keys' last uses (``KeyUseRecorder``) is left out: it runs
    beside the requests, not for them, and made a measured request look one statement dearer
    whenever its minute fell inside it. So are a compiled read's plan settings
    (``PLAN_SETTING``), which read nothing; ``test_compiled_reads`` holds the page's round trips.
    """

    counting: bool = False
    count: int = 0

    def __call__(self, *args: Any) -> None:
        # A unit of work's listeners get the statement; the engine's event gets it third.
        statement: str = args[0] if len(args) == 1 else args[2]
        if (
            self.counting
            and not KEY_USES_WRITE.search(statement)
            and not PLAN_SETTING.match(statement)
        ):
            self.count += 1

    @contextmanager
    def measure(self) -> Iterator[StatementCounter]:
        self.count, self.counting = 0, True
        try:
            yield self
        finally:
            self.counting = False


@pytest.fixture(params=["compiled", "resolvers"])
def reader(
    request: pytest.FixtureRequest, client: TestClient, resolvers_only: TestClient
) -> TestClient:
    """The service as it runs (root fields compiled where they can be), or resolvers only."""
    return client if request.param == "compiled" else resolvers_only


@pytest.fixture
def compiled(reader: TestClient, client: TestClient) -> bool:
    """Whether the reader compiles the root fields it can."""
    return reader is client


@pytest.fixture
def statements(reader: TestClient) -> Iterator[StatementCounter]:
    database: Database = reader.app.state.database  # type: ignore[attr-defined]
    counter = StatementCounter()
    event.listen(database.engine, "before_cursor_execute", counter)
    database.statement_listeners.append(counter)
    try:
        yield counter
    finally:
        database.statement_listeners.remove(counter)
        event.remove(database.engine, "before_cursor_execute", counter)


@pytest.fixture(scope="module")
def crowded(database: Database) -> TenantWorld:
    """A department of 120 deals, each with one to three customers; two in three assigned to one
    of three employees, and activities on every other deal and on its first customer."""
    world = build_tenant(database)
    department = world.department
    employees = [
        create_employee(database, world.tenant.id, department.id, f"Employee {n}", None).id
        for n in range(3)
    ]
    steps = sorted(department.steps, key=lambda step: step.position)
    with database.unit_of_work(world.tenant.scope.in_department(department.id)) as uow:
        for index in range(DEALS):
            customers = [{"last_name": f"Customer {index}-{n}"} for n in range(1 + index % 3)]
            deal = deals_service.create(
                uow,
                validated(
                    DealCreate, {"name": f"Deal {index}", "volume": index, "customers": customers}
                ),
            )
            changes: dict[str, Any] = {"step_id": str(steps[index % 4].id)}
            if index % 3:
                changes["employee_id"] = str(employees[index % 3])
            deals_service.RECORD.update(uow, deal.id, validated(DealPatch, changes))
            if index % 2 == 0:
                for kind in ("call", "note"):
                    activities_service.create(
                        uow,
                        validated(
                            ActivityFields,
                            {
                                "type": kind,
                                "customer_id": str(deal.customers[0].id),
                                "deal_id": str(deal.id),
                                "employee_id": str(employees[0]),
                            },
                        ),
                    )
    return world


Cost = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def cost(reader: TestClient, statements: StatementCounter) -> Cost:
    """``cost(query, headers, **variables)``: the statements the reader sends for the query once
    the key cache is warm for ``headers``, and the query's data."""

    def measured(
        query: str, headers: dict[str, str], **variables: Any
    ) -> tuple[int, dict[str, Any]]:
        data_of(reader, query, variables, headers)  # warms the key cache for this key
        with statements.measure():
            found = data_of(reader, query, variables, headers)
        return statements.count, found

    return measured


def test_a_page_of_deals_with_nested_fields_costs_the_same_statements_at_any_size(
    crowded: TenantWorld, cost: Cost, compiled: bool
) -> None:
    counts = {}
    for first in PAGE_SIZES:
        counts[first], found = cost(DEALS_QUERY, crowded.key.headers, first=first)
        nodes = [edge["node"] for edge in found["deals"]["edges"]]
        assert len(nodes) == first
        # The page really asks every loader: customers, steps, employees and activities.
        assert all(node["customers"] and node["step"]["name"] for node in nodes)
        if first >= 50:
            assert {len(node["customers"]) for node in nodes} == {1, 2, 3}
            assert any(node["employee"] is None for node in nodes)
            assert len({node["employee"]["name"] for node in nodes if node["employee"]}) == 2
            assert {len(node["activities"]) for node in nodes} == {0, 2}

    assert counts[5] == counts[50] == counts[100], counts
    # Compiled, the root field is one statement; through the loaders, a batch per kind.
    assert (counts[100] == 1) if compiled else (0 < counts[100] <= 12), counts


def test_a_page_of_customers_with_their_deals_and_activities_costs_the_same_at_any_size(
    crowded: TenantWorld, cost: Cost, compiled: bool
) -> None:
    counts = {}
    for first in PAGE_SIZES:
        counts[first], found = cost(CUSTOMERS_QUERY, crowded.key.headers, first=first)
        nodes = [edge["node"] for edge in found["customers"]["edges"]]
        assert len(nodes) == first
        assert all(len(node["deals"]) == 1 for node in nodes)
        if first >= 50:
            assert {len(node["activities"]) for node in nodes} == {0, 2}

    assert counts[5] == counts[50] == counts[100], counts
    assert (counts[100] == 1) if compiled else (0 < counts[100] <= 10), counts


def test_the_count_is_paid_once_however_deep_the_nesting(
    crowded: TenantWorld, cost: Cost, compiled: bool
) -> None:
    """Deals' customers' deals, and activities' deals and customers: still one batch each."""
    query = """query($first: Int!) {
      deals(first: $first) { totalCount edges { node {
        customers { deals(first: 3) { id step { name } } }
        activities(first: 3) { customer { lastName } deal { name } employee { name } }
      } } }
    }"""

    counts = {first: cost(query, crowded.key.headers, first=first)[0] for first in (5, 100)}

    assert counts[5] == counts[100], counts
    if compiled:
        assert counts[100] == 1, counts


DELIVERIES_QUERY = """
query($endpointId: UUID!, $first: Int!) {
  webhookDeliveries(endpointId: $endpointId, first: $first) {
    totalCount edges { node { id attempts { attemptedAt statusCode } } }
  }
}
"""


def test_a_page_of_webhook_deliveries_with_their_attempts_costs_the_same_at_any_size(
    client: TestClient, world: TenantWorld, database: Database, cost: Cost
) -> None:
    response = client.post(
        "/api/v1/integration/webhooks",
        json={"url": "https://8.8.8.8/hooks", "events": ["*"]},
        headers=world.key.headers,
    )
    endpoint_id = uuid.UUID(response.json()["id"])
    with database.unit_of_work(world.tenant.scope.in_department(world.department.id)) as uow:
        for _ in range(100):
            deliveries.send_test(uow, endpoint_id)
    now = datetime.now(UTC)
    sent = lease(database, world, now, limit=100)
    record_all(database, world, sent, Response(500, 12, "The endpoint answered 500."), now)
    variables = {"endpointId": str(endpoint_id)}

    counts = {}
    for first in PAGE_SIZES:
        counts[first], found = cost(DELIVERIES_QUERY, world.key.headers, **variables, first=first)
        edges = found["webhookDeliveries"]["edges"]
        assert len(edges) == first
        assert all(len(edge["node"]["attempts"]) == 1 for edge in edges)

    assert counts[5] == counts[50] == counts[100], counts
    # The endpoint's check, the page, the attempts of all its deliveries, and the count.
    assert 0 < counts[100] <= 8, counts


def test_a_query_reads_in_one_transaction_and_returns_its_connection_with_the_response(
    client: TestClient, crowded: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    database: Database = client.app.state.database  # type: ignore[attr-defined]
    opened = []
    unit_of_work = database.unit_of_work_on_event_loop

    def counted(scope: Scope, *, reading: bool = False) -> AbstractAsyncContextManager[UnitOfWork]:
        opened.append(scope)
        return unit_of_work(scope, reading=reading)

    monkeypatch.setattr(database, "unit_of_work_on_event_loop", counted)
    data_of(client, DEALS_QUERY, {"first": 50}, crowded.key.headers)

    # The page and its four loaders (customers, step, employee, activities): one transaction.
    assert len(opened) == 1
    assert database.pool_usage()[0] == 0  # its connection given back
