"""Customers, deals, activities, steps, departments and events as JSON objects: exactly what the
REST API answers with and what events carry as ``data``, built here once (in Python and in
PostgreSQL's SQL) so the two can never drift apart.

The REST wire models (``rest_api/schemas.py``) describe this shape in the OpenAPI document; a
test holds them to it.
"""

from __future__ import annotations

import dataclasses
import operator
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    TIMESTAMP,
    ColumnElement,
    Date,
    FromClause,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    null,
    select,
)
from sqlalchemy.dialects.postgresql import JSON, UUID, aggregate_order_by
from sqlalchemy.sql.base import ReadOnlyColumnCollection
from sqlalchemy.sql.selectable import NamedFromClause

from dealbase.db.statements import tenant_function
from dealbase.platform.activities.models import Activity
from dealbase.platform.customers.models import Customer
from dealbase.platform.deals.models import Deal
from dealbase.platform.tables import customers, deal_customers, employees, steps

JsonObject = dict[str, Any]


def format_timestamp(value: datetime) -> str:
    """ISO 8601 in UTC with exactly six fractional digits and ``Z``, as the document's rule 3."""
    # isoformat, unlike strftime's %Y, pads years before 1000 to four digits.
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def json_value(value: object) -> Any:
    """One attribute of a read model as JSON shows it."""
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, uuid.UUID | date):
        return str(value)
    return value


def _shown(read_model: type, hidden: frozenset[str]) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(read_model) if field.name not in hidden)


def _shape(names: tuple[str, ...]) -> Callable[[object], JsonObject]:
    """The attributes ``names`` of a read model as JSON shows them. Read all at once, and only
    those neither text nor null converted: every write route shapes its record twice (its
    event's data and its response)."""
    read = operator.attrgetter(*names)

    def shape(value: object) -> JsonObject:
        return {
            name: item if item is None or type(item) is str else json_value(item)
            for name, item in zip(names, read(value), strict=True)
        }

    return shape


# The integration document's customer and activity have no department (an integration reaches
# only its own); no resource shows its version, which travels as the ETag header.
CUSTOMER_HIDDEN = frozenset({"department_id", "version"})
DEAL_HIDDEN = frozenset({"version"})
ACTIVITY_HIDDEN = frozenset({"department_id", "version"})

_CUSTOMER_NAMES = _shown(Customer, CUSTOMER_HIDDEN)
_customer_shape = _shape(_CUSTOMER_NAMES)
_DEAL_NAMES = _shown(Deal, DEAL_HIDDEN | {"customers"})
_deal_shape = _shape(_DEAL_NAMES)
_ACTIVITY_NAMES = _shown(Activity, ACTIVITY_HIDDEN)
_activity_shape = _shape(_ACTIVITY_NAMES)


def customer_json(customer: Customer) -> JsonObject:
    return _customer_shape(customer)


# The column in which a customer's row keeps ``customer_json`` of it (migration t0010).
CUSTOMER_JSON_COLUMN = "api_json"


def customer_json_kept_sql(row: NamedFromClause) -> ColumnElement[str]:
    """``customer_json`` of a customers row (``row``: the table or an alias of it) as JSON text,
    read from the row: PostgreSQL keeps it there, in the column ``api_json`` it computes at
    every write (migration t0010), so a read sends it without building it.
    ``tests/platform/test_resources.py`` holds it equal to ``customer_json``."""
    return cast(literal_column(f"{row.name}.{CUSTOMER_JSON_COLUMN}"), Text)


# The arguments of the schema's function that computes a row's ``api_json`` (migration t0010,
# ``customer_api_json``): the JSON's names, in its order, but the tenant's id, which the
# function holds itself.
_CUSTOMER_JSON_ARGUMENTS = tuple(name for name in _CUSTOMER_NAMES if name != "tenant_id")


def customer_json_of(values: Mapping[str, ColumnElement[Any]]) -> ColumnElement[Any]:
    """``customer_json`` of a customer given by its values (parameters, ``now()``) rather than
    read from its row, by the function that computes the row's ``api_json``: what a statement
    that writes the row cannot read back without a subquery, which Citus does not route
    whole."""
    arguments = (values[name] for name in _CUSTOMER_JSON_ARGUMENTS)
    return tenant_function("customer_api_json", *arguments, type_=JSON)


def _pairs(row: FromClause, names: tuple[str, ...]) -> list[Any]:
    pairs: list[Any] = []
    for name, value in _named(row, names):
        # The names are the read model's own identifiers, written as they are.
        pairs.extend((literal_column(f"'{name}'"), value))
    return pairs


def _named(row: FromClause, names: tuple[str, ...]) -> list[tuple[str, ColumnElement[Any]]]:
    """Each of ``names`` with its value of ``row`` as JSON shows it (the tenant's id, which no
    row holds, the parameter ``tenant_id``)."""
    return [
        (
            name,
            bindparam("tenant_id", type_=Text) if name == "tenant_id" else _json_sql(row.c[name]),
        )
        for name in names
    ]


def row_json(row: FromClause, named: list[tuple[str, ColumnElement[Any]]]) -> ColumnElement[Any]:
    """The object of ``named``'s names and values, in their order, as ``json``: ``row_to_json``
    of a row of one column per name (the names are the read model's own identifiers), computed
    from ``row``. It costs PostgreSQL about two thirds of what ``json_build_object`` of the
    same pairs does (a page of 50 customers: 0.17 against 0.26 ms), which looks up each
    argument's type on every call, and writes no spaces."""
    shown = select(*(value.label(name) for name, value in named)).correlate(row).subquery("shown")
    return select(func.row_to_json(literal_column("shown"))).select_from(shown).scalar_subquery()


def _json_sql(column: ColumnElement[Any]) -> ColumnElement[Any]:
    kind = column.type
    if isinstance(kind, TIMESTAMP):
        return func.to_char(func.timezone("UTC", column), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    if isinstance(kind, Date):
        return func.to_char(column, "YYYY-MM-DD")
    if isinstance(kind, UUID):
        return cast(column, Text)
    return column


def deal_json_text_sql(row: FromClause) -> ColumnElement[str]:
    """``deal_json`` of a deals row as JSON text made by PostgreSQL, names in its order: the
    employee's name and the customers (in link order; each ``customer_json``'s
    object, the tenant's id the parameter ``tenant_id``) read by the same statement.
    ``tests/platform/test_resources.py`` holds the two equal."""
    named: list[tuple[str, ColumnElement[Any]]] = []
    for name in _DEAL_NAMES:
        if name == "employee_name":
            employee = employees.alias()
            value: Any = (
                select(employee.c.name)
                .where(employee.c.id == row.c.employee_id)
                .correlate(row)
                .scalar_subquery()
            )
        else:
            value = _json_sql(row.c[name])
        named.append((name, value))
    # Each link's customer by its key: a deal has a few.
    links, customer = deal_customers.alias(), customers.alias()
    item = (
        select(row_json(customer, _named(customer, _CUSTOMER_NAMES)))
        .where(customer.c.id == links.c.customer_id)
        .scalar_subquery()
    )
    linked = func.json_agg(aggregate_order_by(item, links.c.position))
    named.append(
        (
            "customers",
            select(func.coalesce(linked, literal_column("'[]'::json")))
            .where(links.c.deal_id == row.c.id)
            .correlate(row)
            .scalar_subquery(),
        )
    )
    return cast(row_json(row, named), Text)


def new_deal_json_sql(row: FromClause, customers_json: ColumnElement[Any]) -> ColumnElement[Any]:
    """``deal_json`` of a deal that its own statement inserts, as a ``json`` value with names in
    its order: ``row`` returns the deal's columns (a CTE of the insert), ``customers_json`` is
    its customers' JSON array (each customer's kept JSON, in link order). A new deal
    is unassigned: no employee, so no employee's name. ``tests/platform/test_resources.py``
    holds it equal to ``deal_json``."""
    return new_deal_json_of(row.c, customers_json)


def new_deal_json_of(
    values: Mapping[str, ColumnElement[Any]] | ReadOnlyColumnCollection[str, Any],
    customers_json: ColumnElement[Any],
) -> ColumnElement[Any]:
    """``new_deal_json_sql`` of a deal given by its values (parameters, ``now()``), by name,
    rather than read from a row: what a statement that does not insert the deal itself sends
    (a distributed schema's create: ``deals.creation``)."""
    pairs: list[Any] = []
    for name in _DEAL_NAMES:
        value = cast(null(), Text) if name == "employee_name" else _json_sql(values[name])
        pairs.extend((literal_column(f"'{name}'"), value))
    pairs.extend((literal_column("'customers'"), customers_json))
    return func.json_build_object(*pairs)


def deal_json(deal: Deal) -> JsonObject:
    """A deal with its customers, in the order they were linked."""
    shown = _deal_shape(deal)
    shown["customers"] = [_customer_shape(customer) for customer in deal.customers]
    return shown


def activity_json(activity: Activity) -> JsonObject:
    return _activity_shape(activity)


def activity_json_text_sql(row: FromClause) -> ColumnElement[str]:
    """``activity_json`` of an activities row as JSON text made by PostgreSQL, names in its
    order. ``tests/platform/test_resources.py`` holds the two equal."""
    return cast(row_json(row, _named(row, _ACTIVITY_NAMES)), Text)


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
        value = _steps_of(department.c.id) if name == "steps" else _json_sql(department.c[name])
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
            bindparam("tenant_id", type_=Text) if name == "tenant_id" else _json_sql(row.c[name])
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
