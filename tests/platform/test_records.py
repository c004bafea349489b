"""The writes every synced record makes alike (``platform/records.py``), for customers, deals
and activities through their descriptors: a caller's ownership known before any side effect,
references judged against the record's own department, and the events of a change."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.errors import Invalid, NotFound
from dealbase.platform import records
from dealbase.platform.activities import service as activities
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate
from dealbase.platform.events import service as events
from dealbase.platform.events.models import EventFilter
from dealbase.platform.tables import steps
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld


def _customer(uow: UnitOfWork) -> uuid.UUID:
    return customers.create(uow, CustomerFields(last_name="Lovelace")).id


def _deal(uow: UnitOfWork) -> uuid.UUID:
    return deals.create(
        uow, DealCreate(name="Engine", customers=[CustomerFields(last_name="Babbage")])
    ).id


def _activity(uow: UnitOfWork) -> uuid.UUID:
    return activities.create(
        uow, ActivityFields(type="call", subject="Hello", customer_id=_customer(uow))
    ).id


# Each record's descriptor, and how to make one of it in a unit of work.
MADE: dict[str, tuple[records.SyncedRecord[Any, Any, Any], Callable[[UnitOfWork], uuid.UUID]]] = {
    "customer": (customers.RECORD, _customer),
    "deal": (deals.RECORD, _deal),
    "activity": (activities.RECORD, _activity),
}


def _made(
    database: Database, scope: Scope, noun: str
) -> tuple[records.SyncedRecord[Any, Any, Any], uuid.UUID]:
    """A new ``noun`` of ``scope``'s department: its descriptor and its id."""
    record, make = MADE[noun]
    with database.unit_of_work(scope) as uow:
        return record, make(uow)


@pytest.fixture(params=sorted(MADE))
def noun(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=sorted(noun for noun, (record, _) in MADE.items() if record.references))
def referring(request: pytest.FixtureRequest) -> str:
    """A record that names other rows of its department."""
    return str(request.param)


@pytest.fixture
def two_departments(make_tenant: Callable[..., TenantWorld]) -> tuple[Scope, Scope]:
    world = make_tenant(departments=2)
    return tuple(  # type: ignore[return-value]
        world.tenant.scope.in_department(department.id) for department in world.departments
    )


def test_a_delete_of_another_departments_record_is_not_found_before_any_side_effect(
    database: Database, two_departments: tuple[Scope, Scope], noun: str
) -> None:
    owner, stranger = two_departments
    record, record_id = _made(database, owner, noun)
    side_effects: list[uuid.UUID] = []

    def before_delete(uow: UnitOfWork, deleted: uuid.UUID) -> None:
        side_effects.append(deleted)
        record.before_delete(uow, deleted)

    watched = dataclasses.replace(record, before_delete=before_delete)
    with database.unit_of_work(stranger) as uow, pytest.raises(NotFound):
        watched.delete(uow, record_id)
    with database.unit_of_work(owner) as uow:
        watched.delete(uow, record_id)

    assert side_effects == [record_id]  # the owner's delete only
    with database.unit_of_work(owner) as uow:
        assert record.by_ids(uow, [record_id]) == {}
        types = [event.type for event in events.feed(uow, EventFilter(), 100, None).items]
    assert types[-1] == f"{noun}.deleted"


def test_an_update_naming_rows_of_another_department_is_invalid_for_each_reference(
    database: Database, two_departments: tuple[Scope, Scope], referring: str
) -> None:
    owner, other = two_departments
    record, record_id = _made(database, owner, referring)
    with database.unit_of_work(other) as uow:
        elsewhere = {"customer_id": _customer(uow), "deal_id": _deal(uow)}
        elsewhere["step_id"] = uow.connection.execute(
            select(steps.c.id).where(steps.c.department_id == other.department_id).limit(1)
        ).scalar_one()
    # Every reference but the employee's (the CLI makes employees; the routes' tests name one).
    named = {name: elsewhere[name] for name in record.references if name != "employee_id"}

    with database.unit_of_work(owner) as uow, pytest.raises(Invalid) as refused:
        record.change_later(uow, record_id, dict(named)).read()

    assert [error.field for error in refused.value.errors] == list(named)
    assert {error.code for error in refused.value.errors} <= {"not_found"}


def test_a_change_is_one_updated_event_with_the_values_before(
    database: Database, world: TenantWorld, noun: str
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)
    record, make = MADE[noun]
    field = {"customer": "city", "deal": "name", "activity": "subject"}[noun]
    with database.unit_of_work(scope) as uow:
        record_id = make(uow)
        before = getattr(next(iter(record.by_ids(uow, [record_id]).values())), field)
    with database.unit_of_work(scope) as uow:
        changed = record.change_later(uow, record_id, {field: "Changed"}).read()
        unchanged = record.change_later(uow, record_id, {field: "Changed"}).read()
    with database.unit_of_work(scope) as uow:
        feed = events.feed(uow, EventFilter(), 100, None).items

    assert (changed["version"], unchanged["version"]) == (2, 3)  # every accepted change a version
    updated = [event for event in feed if event.type == f"{noun}.updated"]
    assert [(event.changed_fields, event.previous) for event in updated] == [
        ([field], {field: before})
    ]
    assert updated[0].data[field] == "Changed"
