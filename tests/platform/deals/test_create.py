"""A deal's create: one statement writes the deal, its customers, their links and their events,
its JSON made by PostgreSQL; a taken external id or a department without steps writes nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from dealbase.db.database import Database
from dealbase.errors import Conflict, ExternalIdTaken
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate
from dealbase.platform.resources import customer_json, deal_json
from dealbase.platform.tables import customers as customers_table
from dealbase.platform.tables import deal_customers, events, steps
from dealbase.platform.tables import deals as deals_table
from dealbase.platform.validation import validated
from tests.platform.test_resources import EVERY_FIELD
from tests.support import TenantWorld, wait_until_a_transaction_waits_for_a_lock

# Creates of each kind: no customers, one, and three with every field and quoting to keep.
DEAL_CREATES = pytest.mark.parametrize(
    ("given", "fields"),
    [
        ([], {}),
        ([{"last_name": "Only"}], {"volume": 0}),
        (
            [
                EVERY_FIELD,
                {"last_name": "Second"},
                {"last_name": "Third", "birthday": "2000-02-29"},
            ],
            {
                "volume": 2**62,
                "external_id": "order-1",
                "deal_origin": "fair",
                "note": 'a "note"\n\\',
            },
        ),
    ],
    ids=["no customers", "one customer", "three customers, every field"],
)


def _deal(customers_given: list[dict[str, Any]], **fields: Any) -> DealCreate:
    return validated(
        DealCreate, {"name": "Engine 'ünïcødé'", **fields, "customers": customers_given}
    )


def _events(database: Database, world: TenantWorld) -> list[tuple[str, Any]]:
    """The tenant's events in the order they are numbered: (type, data)."""
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(events.c.type, events.c.data).order_by(events.c.sequence, events.c.id)
        )
        return [(row[0], row[1]) for row in rows]


def rows_written(database: Database, world: TenantWorld) -> tuple[int, ...]:
    """How many deals, customers, links and events the tenant holds."""
    with database.unit_of_work(world.tenant.scope) as uow:
        return tuple(
            uow.connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (deals_table, customers_table, deal_customers, events)
        )


@DEAL_CREATES
def test_a_create_made_by_postgresql_is_the_deal_as_the_api_shows_it_with_its_events(
    database: Database,
    make_tenant: Callable[..., TenantWorld],
    given: list[dict[str, Any]],
    fields: dict[str, Any],
) -> None:
    world = make_tenant()
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        deal_id, version, text = deals.create_later_as_json(uow, _deal(given, **fields)).read()
    with database.unit_of_work(scope) as uow:
        shown = deal_json(deals.RECORD.get(uow, deal_id))

    assert version == 1
    assert json.loads(text) == shown
    assert list(json.loads(text)) == list(shown)
    assert [customer["last_name"] for customer in shown["customers"]] == [
        customer["last_name"] for customer in given
    ]
    # The customers' events first: a receiver of deal.created knows the customers it names.
    assert _events(database, world) == [
        *(("customer.created", customer) for customer in shown["customers"]),
        ("deal.created", shown),
    ]


def test_a_create_read_before_its_commit_is_the_deal_as_read_again(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        created = deals.create(uow, _deal([{"last_name": "A"}, EVERY_FIELD, {"last_name": "C"}]))
    with database.unit_of_work(scope) as uow:
        assert deals.RECORD.get(uow, created.id) == created
    assert [customer_json(customer) for customer in created.customers] == [
        data for kind, data in _events(database, world) if kind == "customer.created"
    ][-3:]


@pytest.mark.parametrize("taken", ["the deal's", "a customer's", "both"])
@pytest.mark.parametrize("read", ["with the commit", "before it"])
def test_a_taken_external_id_writes_nothing_and_names_the_deal_first(
    database: Database, make_tenant: Callable[..., TenantWorld], taken: str, read: str
) -> None:
    world = make_tenant()
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        deals.create(uow, _deal([{"last_name": "Kept", "external_id": "crm-1"}], external_id="o-1"))
    before = rows_written(database, world)
    deal_id = None if taken == "a customer's" else "o-1"
    customer_id = None if taken == "the deal's" else "crm-1"
    fields = _deal(
        [{"last_name": "New"}, {"last_name": "Again", "external_id": customer_id}],
        external_id=deal_id,
    )

    def create() -> None:
        with database.unit_of_work(scope) as uow:
            if read == "before it":
                deals.create(uow, fields)
            else:
                deals.create_later_as_json(uow, fields)

    with pytest.raises(ExternalIdTaken) as raised:
        create()

    assert ("Another deal" in str(raised.value)) is (taken != "a customer's")
    assert rows_written(database, world) == before


def test_a_department_without_steps_is_a_conflict_that_writes_nothing(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        uow.connection.execute(delete(steps))
    before = rows_written(database, world)

    with pytest.raises(Conflict, match="no pipeline steps"), database.unit_of_work(scope) as uow:
        deals.create_later_as_json(uow, _deal([{"last_name": "A"}]))

    assert rows_written(database, world) == before


def test_a_create_that_meets_an_uncommitted_one_of_the_same_external_id_waits_and_is_refused(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    first_inserted = threading.Event()

    def first() -> None:
        with database.unit_of_work(scope) as uow:
            deals.create(uow, _deal([], external_id="order-9"))
            first_inserted.set()
            # Held open until the second waits in its own insert.
            wait_until_a_transaction_waits_for_a_lock(database)

    def second() -> None:
        # After the first's insert, not after a time: a wait that ran out would go on unordered.
        assert first_inserted.wait(10), "the first create never inserted"
        with database.unit_of_work(scope) as uow:
            deals.create_later_as_json(uow, _deal([{"last_name": "B"}], external_id="order-9"))

    with ThreadPoolExecutor(2) as pool:
        done = pool.submit(first)
        refused = pool.submit(second)
        done.result(timeout=30)
        with pytest.raises(ExternalIdTaken):
            refused.result(timeout=30)
    # The first's deal alone: the second wrote neither its deal nor its customer.
    assert rows_written(database, world)[:3] == (1, 0, 0)


def test_a_customer_create_beside_it_keeps_its_own_event(
    database: Database, world: TenantWorld
) -> None:
    """A deal's create and a customer's in one transaction: each event once, in the order
    they were recorded."""
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        alone = customers.create(uow, CustomerFields(last_name="Alone"))
        created = deals.create(uow, _deal([{"last_name": "Linked"}]))
    assert [(kind, data["id"]) for kind, data in _events(database, world)] == [
        ("customer.created", str(alone.id)),
        ("customer.created", str(created.customers[0].id)),
        ("deal.created", str(created.id)),
    ]
