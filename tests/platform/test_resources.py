"""JSON made by PostgreSQL (the event a customer's create records in the same statement, REST's
reads of customers, deals, activities, steps, the department and the events feed) is the JSON
the API answers with, value for value and name for name: each record's both made of its one
declaration (``resources.CUSTOMER``, ``DEAL``, ``ACTIVITY``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from dealbase.platform.activities import service as activities
from dealbase.platform.activities.models import ActivityFields, ActivityFilter
from dealbase.platform.batches.models import Batch
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields, CustomerFilter, CustomerPatch
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate, DealFilter, DealPatch
from dealbase.platform.events import service as event_service
from dealbase.platform.events.models import EventFilter, event_json
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.resources import ACTIVITY, CUSTOMER, DEAL
from dealbase.platform.tables import events
from dealbase.platform.validation import validated
from dealbase.rest_api.schemas import DepartmentOut, StepList
from tests.depth import SHARED_FIXTURES
from tests.support import TenantWorld

EVERY_FIELD: dict[str, Any] = {
    "last_name": "Lovelace 'Ada' \\ \"Byron\"",
    "first_name": "Ünïcødé ✓",
    "company": "Analytical Engines Ltd",
    "website": "https://example.com/a?b=c&d=e",
    "title": "Countess",
    "phone_1": "+44 20 7946 0000",
    "phone_2": "+44 20 7946 0001",
    "phone_3": "+44 20 7946 0002",
    "phone_1_label": "office",
    "phone_2_label": "home",
    "phone_3_label": "mobile",
    "email": "ada@example.com",
    "postcode": "W1",
    "address": "12 St James's Square",
    "address_addition": "Flat 1\nback door",
    "city": "London",
    "country": "GB",
    "state": "Greater London",
    "contact_origin": "website",
    "birthday": "1915-12-10",
    "note": '{"json": [1, 2]} </script>',
    "external_id": "crm-1",
}


def test_the_customer_given_every_field_gives_every_field_of_its_declaration() -> None:
    """So the equalities below cover a field added to the customer's declaration."""
    made_by_the_server = {"id", "created_at", "updated_at"}
    stored = {each.name for each in CUSTOMER.fields if each.source is None}

    assert set(EVERY_FIELD) == stored - made_by_the_server


def _created_with_its_event(
    database: Database, world: TenantWorld, fields: dict[str, Any]
) -> tuple[dict[str, Any], Any]:
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        customer = customers.create(uow, CustomerFields.model_validate_json(json.dumps(fields)))
    with database.unit_of_work(scope) as uow:
        (data,) = uow.connection.execute(
            select(events.c.data).where(events.c.data["id"].astext == str(customer.id))
        ).one()
    return CUSTOMER.as_json(customer), data


@pytest.mark.parametrize(
    "fields",
    [
        EVERY_FIELD,
        {"last_name": "Only"},
        {"last_name": "Earliest", "birthday": "1850-01-01"},
        {"last_name": "Leap", "birthday": "2000-02-29"},
    ],
    ids=["every field", "only the required one", "the earliest birthday", "a leap day"],
)
def test_the_event_of_a_create_carries_the_customer_as_the_api_shows_it(
    database: Database, world: TenantWorld, fields: dict[str, Any]
) -> None:
    shown, recorded = _created_with_its_event(database, world, fields)
    assert recorded == shown


@settings(SHARED_FIXTURES, max_examples=15)
@given(
    last_name=st.text(
        alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=40
    ).filter(str.strip),
    note=st.none()
    | st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        max_size=40,
    ),
)
def test_any_text_travels_into_the_event_unchanged(
    database: Database, world: TenantWorld, last_name: str, note: str | None
) -> None:
    shown, recorded = _created_with_its_event(
        database, world, {"last_name": last_name, "note": note}
    )
    assert recorded == shown


def _listed_both_ways(
    database: Database, world: TenantWorld, created: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The department's customers as the list's JSON text made by PostgreSQL, parsed in its
    order, and as the declaration makes them of the read models."""
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        for fields in created:
            customers.create(uow, CustomerFields.model_validate_json(json.dumps(fields)))
    every = CustomerFilter()
    with database.unit_of_work(scope) as uow:
        texts = customers.RECORD.list_page_as_json(uow, every, 100, None).items
        models = customers.RECORD.list_page(uow, every, 100, None).items
    return [json.loads(text) for text in texts], [CUSTOMER.as_json(model) for model in models]


def test_a_list_made_by_postgresql_is_the_customers_as_the_api_shows_them_in_their_order(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    created = [
        EVERY_FIELD,
        {"last_name": "Only"},
        {"last_name": "Earliest", "birthday": "1850-01-01"},
        {"last_name": "Leap", "birthday": "2000-02-29"},
    ]
    made, shown = _listed_both_ways(database, world, created)
    assert made == shown
    assert [list(each) for each in made] == [list(each) for each in shown]


@settings(SHARED_FIXTURES, max_examples=10)
@given(
    names=st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=40
        ).filter(str.strip),
        min_size=1,
        max_size=3,
    ),
    note=st.none()
    | st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        max_size=40,
    ),
)
def test_any_text_is_listed_by_postgresql_as_the_api_shows_it(
    database: Database, make_tenant: Callable[..., TenantWorld], names: list[str], note: str | None
) -> None:
    world = make_tenant()
    made, shown = _listed_both_ways(
        database, world, [{"last_name": name, "note": note} for name in names]
    )
    assert made == shown


def test_one_customer_made_by_postgresql_is_the_customer_as_the_api_shows_it_at_its_version(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        created = customers.create(uow, CustomerFields.model_validate_json(json.dumps(EVERY_FIELD)))
    with database.unit_of_work(scope) as uow:
        version, text = customers.RECORD.get_as_json(uow, created.id)
        shown = CUSTOMER.as_json(customers.RECORD.get(uow, created.id))

    assert version == created.version
    assert json.loads(text) == shown
    assert list(json.loads(text)) == list(shown)


def test_every_write_of_a_customer_leaves_it_listed_by_postgresql_as_the_api_shows_it(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    """After every route that writes a customer: a change, a clearing, an upsert of one that
    exists and of a new one, a batch, a deal's new customers."""
    world = make_tenant()
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        changed = customers.create(uow, CustomerFields.model_validate_json(json.dumps(EVERY_FIELD)))
        customers.RECORD.update(
            uow,
            changed.id,
            validated(CustomerPatch, {"first_name": "Changed ✓", "note": None, "city": "Paris"}),
        )
        customers.RECORD.upsert(
            uow, "crm-1", validated(CustomerFields, {"last_name": "Upserted 'x'"})
        )
        customers.RECORD.upsert(uow, "crm-new", validated(CustomerFields, {"last_name": "New"}))
        customers.RECORD.batch(
            uow,
            validated(
                Batch,
                {
                    "operations": [
                        {
                            "op": "upsert",
                            "external_id": "crm-new",
                            "data": {"last_name": "New", "title": "Dr"},
                        },
                        {
                            "op": "create",
                            "data": {"last_name": "Batched", "birthday": "2000-02-29"},
                        },
                    ]
                },
            ),
            atomic=True,
        )
        deals.create(
            uow, validated(DealCreate, {"name": "Engine", "customers": [{"last_name": "Dealt"}]})
        )
    every = CustomerFilter()
    with database.unit_of_work(scope) as uow:
        listed = [
            json.loads(text)
            for text in customers.RECORD.list_page_as_json(uow, every, 100, None).items
        ]
        shown = [
            CUSTOMER.as_json(model)
            for model in customers.RECORD.list_page(uow, every, 100, None).items
        ]

    assert [each["last_name"] for each in listed] == [
        "Upserted 'x'",
        "New",
        "Batched",
        "Dealt",
    ]
    assert listed[0]["first_name"] == "Changed ✓" and listed[0]["note"] is None
    assert listed[1]["title"] == "Dr"
    assert listed == shown
    assert [list(each) for each in listed] == [list(each) for each in shown]


def test_a_create_made_by_postgresql_is_the_customer_as_the_api_shows_it(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    fields = CustomerFields.model_validate_json(json.dumps(EVERY_FIELD))
    with database.unit_of_work(scope) as uow:
        # Read before the COMMIT, as a keyed create does (the insert goes then).
        customer_id, version, text = customers.create_later_as_json(uow, fields).read()
    with database.unit_of_work(scope) as uow:
        shown = CUSTOMER.as_json(customers.RECORD.get(uow, customer_id))

    assert version == 1
    assert json.loads(text) == shown
    assert list(json.loads(text)) == list(shown)


def test_deals_made_by_postgresql_are_the_deals_as_the_api_shows_them_in_every_order(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    employee = create_employee(database, world.tenant.id, world.department.id, "Ada", None)
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        for index, volume in enumerate((None, 0, 2**62, 7, None)):
            created = deals.create(
                uow,
                validated(
                    DealCreate,
                    {
                        "name": f"Deal {index} 'ünïcødé'",
                        "volume": volume,
                        "customers": [
                            {**EVERY_FIELD, "external_id": f"crm-deal-{index}"},
                            {"last_name": "Second"},
                        ][: index % 3],
                    },
                ),
            )
            if index % 2:
                deals.RECORD.update(
                    uow, created.id, validated(DealPatch, {"employee_id": str(employee.id)})
                )
    for order in ("created_asc", "created_desc", "volume_asc", "volume_desc"):
        filters = DealFilter(order_by=order)
        with database.unit_of_work(scope) as uow:
            made = deals.RECORD.list_page_as_json(uow, filters, 2, None)
            shown = deals.RECORD.list_page(uow, filters, 2, None)
            following = deals.RECORD.list_page_as_json(uow, filters, 100, made.next_cursor)
            rest = deals.RECORD.list_page(uow, filters, 100, shown.next_cursor)
        assert [json.loads(text) for text in made.items] == [DEAL.as_json(d) for d in shown.items]
        assert [list(json.loads(text)) for text in made.items] == [
            list(DEAL.as_json(d)) for d in shown.items
        ]
        assert (made.next_cursor, made.cursors) == (shown.next_cursor, shown.cursors)
        assert [json.loads(text) for text in following.items] == [
            DEAL.as_json(d) for d in rest.items
        ]
    with database.unit_of_work(scope) as uow:
        one = shown.items[0]
        version, text = deals.RECORD.get_as_json(uow, one.id)
    assert (version, json.loads(text)) == (one.version, DEAL.as_json(one))


def test_activities_made_by_postgresql_are_the_activities_as_the_api_shows_them(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    employee = create_employee(database, world.tenant.id, world.department.id, "Ada", None)
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        customer = customers.create(
            uow, CustomerFields.model_validate_json(json.dumps(EVERY_FIELD))
        )
        deal = deals.create(uow, validated(DealCreate, {"name": "Engine"}))
        for fields in (
            {"type": "call", "customer_id": str(customer.id)},
            {
                "type": "meeting",
                "external_id": "crm-call-'1'",
                "subject": 'Ünïcødé ✓ "quoted" \\ </script>',
                "note": "line\nbreak",
                # Before 1000, a whole second, and microseconds: each written as the API does.
                "due_at": "0999-01-02T03:04:05Z",
                "done_at": "2026-12-01T09:00:00.000001+02:00",
                "customer_id": str(customer.id),
                "deal_id": str(deal.id),
                "employee_id": str(employee.id),
            },
            {"type": "note", "customer_id": str(customer.id), "due_at": "2026-12-01T00:00:00Z"},
        ):
            activities.create(uow, validated(ActivityFields, fields))
    every = ActivityFilter()
    with database.unit_of_work(scope) as uow:
        made = activities.RECORD.list_page_as_json(uow, every, 2, None)
        shown = activities.RECORD.list_page(uow, every, 2, None)
        following = activities.RECORD.list_page_as_json(uow, every, 100, made.next_cursor)
        rest = activities.RECORD.list_page(uow, every, 100, shown.next_cursor)
    assert [json.loads(text) for text in made.items] == [ACTIVITY.as_json(a) for a in shown.items]
    assert [list(json.loads(text)) for text in made.items] == [
        list(ACTIVITY.as_json(a)) for a in shown.items
    ]
    assert (made.next_cursor, made.cursors) == (shown.next_cursor, shown.cursors)
    assert [json.loads(text) for text in following.items] == [
        ACTIVITY.as_json(a) for a in rest.items
    ]
    assert len(made.items) + len(following.items) == 3
    for one in (*shown.items, *rest.items):
        with database.unit_of_work(scope) as uow:
            version, text = activities.RECORD.get_as_json(uow, one.id)
        assert (version, json.loads(text)) == (one.version, ACTIVITY.as_json(one))
        assert list(json.loads(text)) == list(ACTIVITY.as_json(one))


def test_a_department_and_its_steps_made_by_postgresql_are_as_their_wire_models_show_them(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        department_text = pipeline.own_department_as_json(uow)
        steps_text = pipeline.steps_as_json(uow)
        department = pipeline.own_department(uow)
        steps = pipeline.steps_in_order(uow)
    shown = DepartmentOut.model_validate(department).model_dump(mode="json")
    assert json.loads(department_text) == shown
    assert list(json.loads(department_text)) == list(shown)
    assert [list(step) for step in json.loads(department_text)["steps"]] == [
        list(step) for step in shown["steps"]
    ]
    listed = StepList.model_validate({"data": steps}).model_dump(mode="json")
    assert json.loads(steps_text) == listed
    assert [list(step) for step in json.loads(steps_text)["data"]] == [
        list(step) for step in listed["data"]
    ]


def test_a_feed_made_by_postgresql_is_the_events_as_the_api_shows_them(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        customer = customers.create(
            uow, CustomerFields.model_validate_json(json.dumps(EVERY_FIELD))
        )
    with database.unit_of_work(scope) as uow:
        # An update's event has changed_fields and previous; a create's has neither.
        customers.RECORD.update(
            uow, customer.id, validated(CustomerPatch, {"note": None, "city": "Ü"})
        )
    with database.unit_of_work(scope) as uow:
        deals.create(uow, validated(DealCreate, {"name": "Engine", "volume": 2**62}))
        customers.RECORD.delete(uow, customer.id, None)
    every = EventFilter()
    with database.unit_of_work(scope) as uow:
        texts, next_cursor = event_service.feed_as_json(uow, every, 2, None).read()
        page = event_service.feed(uow, every, 2, None)
        rest_texts, rest_cursor = event_service.feed_as_json(uow, every, 100, next_cursor).read()
        rest = event_service.feed(uow, every, 100, page.next_cursor)
        empty = event_service.feed_as_json(uow, every, 100, rest_cursor).read()
    assert [json.loads(text) for text in texts] == [event_json(e) for e in page.items]
    assert [list(json.loads(text)) for text in texts] == [list(event_json(e)) for e in page.items]
    assert next_cursor == page.next_cursor
    assert [json.loads(text) for text in rest_texts] == [event_json(e) for e in rest.items]
    assert [list(json.loads(text)) for text in rest_texts] == [
        list(event_json(e)) for e in rest.items
    ]
    assert rest_cursor == rest.next_cursor
    assert len(texts) + len(rest_texts) >= 4
    assert any("changed_fields" in json.loads(text) for text in (*texts, *rest_texts))
    assert empty == ([], rest_cursor)
