"""A customer's JSON made by PostgreSQL (the event its create records in the same statement)
is the JSON the API answers with, value for value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.resources import customer_json
from dealbase.platform.tables import events
from dealbase.tenancy.database import Database
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
    return customer_json(customer), data


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


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
