"""Customers, deals, activities, steps, departments and events as JSON objects: exactly what the
REST API answers with and what events carry as ``data``. A record's shape is declared once here
(``CUSTOMER``, ``DEAL``, ``ACTIVITY``: ``shapes.shape_of`` its read model), and every rendering,
in Python and in PostgreSQL's SQL, is made of that declaration (``platform.shapes``).

The REST wire models (``rest_api/schemas.py``) describe this shape in the OpenAPI document; a
test holds them to it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by

from dealbase.platform.activities.models import Activity
from dealbase.platform.customers.models import Customer
from dealbase.platform.deals.models import Deal
from dealbase.platform.shapes import (
    TENANT_ID,
    Linked,
    LookedUp,
    column_value,
    shape_of,
)

# Imported from here by the modules that write the API's timestamps and JSON objects.
from dealbase.platform.shapes import JsonObject as JsonObject
from dealbase.platform.shapes import format_timestamp as format_timestamp
from dealbase.platform.tables import (
    activities,
    customers,
    deal_customers,
    deals,
    employees,
    steps,
)

# The integration document's customer and activity have no department (an integration reaches
# only its own); no resource shows its version, which travels as the ETag header.
CUSTOMER_HIDDEN = frozenset({"department_id", "version"})
DEAL_HIDDEN = frozenset({"version"})
ACTIVITY_HIDDEN = frozenset({"department_id", "version"})

CUSTOMER = shape_of(Customer, customers, hidden=CUSTOMER_HIDDEN, sources={"tenant_id": TENANT_ID})
DEAL = shape_of(
    Deal,
    deals,
    hidden=DEAL_HIDDEN,
    sources={
        "employee_name": LookedUp(employees, key="employee_id", value="name"),
        # In the order they were linked.
        "customers": Linked(
            CUSTOMER, deal_customers, parent="deal_id", child="customer_id", order="position"
        ),
    },
)
ACTIVITY = shape_of(Activity, activities, hidden=ACTIVITY_HIDDEN)


def customer_json(customer: Customer) -> JsonObject:
    return CUSTOMER.as_json(customer)


def deal_json(deal: Deal) -> JsonObject:
    """A deal with its customers, in the order they were linked."""
    return DEAL.as_json(deal)


def activity_json(activity: Activity) -> JsonObject:
    return ACTIVITY.as_json(activity)


def _pairs(row: FromClause, names: tuple[str, ...]) -> list[Any]:
    pairs: list[Any] = []
    for name in names:
        # The names are the wire model's own identifiers, written as they are.
        pairs.extend((literal_column(f"'{name}'"), column_value(row.c[name])))
    return pairs


# A step and a department as the REST API shows them (``rest_api.schemas.StepOut``,
# ``DepartmentOut``), in their order; ``tests/platform/test_resources.py`` holds them equal.
_STEP_NAMES = ("id", "name", "position")


def _steps_of(department_id: ColumnElement[Any]) -> ColumnElement[Any]:
    """The steps of the department ``department_id`` in pipeline order, a JSON array (empty
    when it has none)."""
    step = steps.alias()
    items = func.json_agg(
        aggregate_order_by(func.json_build_object(*_pairs(step, _STEP_NAMES)), step.c.position)
    )
    return (
        select(func.coalesce(items, literal_column("'[]'::json")))
        .where(step.c.department_id == department_id)
        .scalar_subquery()
    )


def steps_json_text_sql(department_id: ColumnElement[Any]) -> ColumnElement[str]:
    """``GET /steps``' body, ``{"data": [...]}``, of the department ``department_id``, made by
    PostgreSQL."""
    return cast(func.json_build_object(literal_column("'data'"), _steps_of(department_id)), Text)


def department_json_text_sql(department: FromClause) -> ColumnElement[str]:
    """``GET /department``'s body of a departments row: the department with its steps in
    pipeline order, made by PostgreSQL."""
    pairs: list[Any] = []
    for name in ("id", "name", "steps", "created_at", "updated_at"):
        value = _steps_of(department.c.id) if name == "steps" else column_value(department.c[name])
        pairs.extend((literal_column(f"'{name}'"), value))
    return cast(func.json_build_object(*pairs), Text)


def event_json_text_sql(row: FromClause) -> ColumnElement[str]:
    """``events.models.event_json`` of an events row as JSON text made by PostgreSQL, names in
    its order (``changed_fields`` and ``previous`` only where the event has them; the tenant's
    id, which no row holds, is the parameter ``tenant_id``). ``tests/platform/test_resources.py``
    holds the two equal."""
    pairs: list[Any] = []
    for name in ("id", "type", "created_at", "tenant_id", "department_id", "data"):
        value = (
            bindparam("tenant_id", type_=Text) if name == "tenant_id" else column_value(row.c[name])
        )
        pairs.extend((literal_column(f"'{name}'"), value))
    changed = [
        *pairs,
        literal_column("'changed_fields'"),
        row.c.changed_fields,
        literal_column("'previous'"),
        row.c.previous,
    ]
    shown = case(
        (row.c.changed_fields.is_(None), func.json_build_object(*pairs)),
        else_=func.json_build_object(*changed),
    )
    return cast(shown, Text)
