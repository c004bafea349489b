from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Select,
    bindparam,
    func,
    insert,
    select,
    true,
)

from dealbase.db.statements import Record, built_once, dataclass_of_row
from dealbase.db.transactions import TenantConnection
from dealbase.ids import new_id
from dealbase.platform.pagination import PageRequest
from dealbase.platform.pipeline.models import (
    Department,
    Employee,
    EmployeeSummary,
    Step,
    StepKind,
    StepSummary,
    StepTotals,
)
from dealbase.platform.resources import department_json_text_sql, steps_json_text_sql
from dealbase.platform.rows import OwnedRows, first_as, in_department
from dealbase.platform.tables import deals, departments, employees, steps

# Their rows as every department-owned record's are read.
step_rows = OwnedRows(steps, "step")
employee_rows = OwnedRows(employees, "employee")


def to_step(row: Record) -> Step:
    return dataclass_of_row(Step, row)


def to_employee(row: Record) -> Employee:
    return dataclass_of_row(Employee, row)


def steps_by_ids(
    connection: TenantConnection, department_id: uuid.UUID | None, step_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Step]:
    """Many steps the caller may see, by id, in one statement; unknown ids are left out."""
    found = step_rows.by_ids(connection, department_id, step_ids)
    return {row_id: to_step(row) for row_id, row in found.items()}


def employees_by_ids(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    employee_ids: Sequence[uuid.UUID],
) -> dict[uuid.UUID, Employee]:
    """Many employees the caller may see, by id, in one statement; unknown ids are left out."""
    found = employee_rows.by_ids(connection, department_id, employee_ids)
    return {row_id: to_employee(row) for row_id, row in found.items()}


def insert_department(
    connection: TenantConnection, name: str, pipeline: tuple[tuple[str, StepKind], ...]
) -> Department:
    department = (
        connection.execute(
            insert(departments)
            .values(id=new_id(), name=name, created_at=func.now(), updated_at=func.now())
            .returning(*departments.c)
        )
        .mappings()
        .one()
    )
    step_rows = (
        connection.execute(
            insert(steps).returning(*steps.c),
            [
                {
                    "id": new_id(),
                    "department_id": department["id"],
                    "name": step_name,
                    "kind": kind,
                    "position": position,
                    "created_at": department["created_at"],
                    "updated_at": department["created_at"],
                }
                for position, (step_name, kind) in enumerate(pipeline, start=1)
            ],
        )
        .mappings()
        .all()
    )
    return Department(
        department["id"],
        department["name"],
        department["created_at"],
        department["updated_at"],
        tuple(to_step(row) for row in step_rows),
    )


def get_department(connection: TenantConnection, department_id: uuid.UUID) -> Department | None:
    row = (
        connection.execute(select(departments).where(departments.c.id == department_id))
        .mappings()
        .first()
    )
    if row is None:
        return None
    return Department(
        row["id"],
        row["name"],
        row["created_at"],
        row["updated_at"],
        list_steps(connection, row["id"]),
    )


_DEPARTMENT_ID = bindparam("department_id", type_=departments.c.id.type)
_DEPARTMENT_AS_JSON = built_once(
    select(department_json_text_sql(departments)).where(departments.c.id == _DEPARTMENT_ID)
)
# One row whatever the department has (no steps: an empty list, as ``list_steps``).
_STEPS_AS_JSON = built_once(select(steps_json_text_sql(_DEPARTMENT_ID)))


def department_as_json(connection: TenantConnection, department_id: uuid.UUID) -> str | None:
    """The department with its steps as ``GET /department`` shows it, JSON text made by
    PostgreSQL in one statement; None when there is no such department."""
    found: str | None = connection.execute(
        _DEPARTMENT_AS_JSON, {"department_id": department_id}
    ).scalar_one_or_none()
    return found


def steps_as_json(connection: TenantConnection, department_id: uuid.UUID) -> str:
    """``GET /steps``' body for the department (``list_steps``), JSON text made by
    PostgreSQL."""
    found: str = connection.execute(_STEPS_AS_JSON, {"department_id": department_id}).scalar_one()
    return found


def list_steps(connection: TenantConnection, department_id: uuid.UUID) -> tuple[Step, ...]:
    rows = connection.execute(
        select(steps).where(steps.c.department_id == department_id).order_by(steps.c.position)
    ).mappings()
    return tuple(to_step(row) for row in rows)


def insert_employee(
    connection: TenantConnection, department_id: uuid.UUID, name: str, email: str | None
) -> Employee:
    row = (
        connection.execute(
            insert(employees)
            .values(
                id=new_id(),
                department_id=department_id,
                name=name,
                email=email,
                created_at=func.now(),
                updated_at=func.now(),
            )
            .returning(*employees.c)
        )
        .mappings()
        .one()
    )
    return to_employee(row)


def first_department(connection: TenantConnection) -> Department | None:
    department_id = connection.execute(
        select(departments.c.id).order_by(departments.c.created_at, departments.c.id).limit(1)
    ).scalar_one_or_none()
    return None if department_id is None else get_department(connection, department_id)


def first_employee(connection: TenantConnection, department_id: uuid.UUID) -> Employee | None:
    query = (
        select(employees)
        .where(employees.c.department_id == department_id)
        .order_by(employees.c.created_at, employees.c.id)
        .limit(1)
    )
    return first_as(connection, query, to_employee)


def list_employees(
    connection: TenantConnection, department_id: uuid.UUID | None, page: PageRequest
) -> list[Employee]:
    query = select(employees).where(in_department(employees, department_id))
    if page.after is not None:
        query = query.where(employees.c.id > page.after)
    rows = connection.execute(query.order_by(employees.c.id).limit(page.limit + 1)).mappings()
    return [to_employee(row) for row in rows]


def step_totals(connection: TenantConnection, department_id: uuid.UUID) -> list[StepTotals]:
    """Each step of the department with the count and volume of the deals now in it: one
    statement, summed by PostgreSQL."""
    rows = connection.execute(
        select(
            steps,
            func.count(deals.c.id).label("deal_count"),
            func.coalesce(func.sum(deals.c.volume), 0).label("total_volume"),
        )
        .outerjoin(deals, deals.c.step_id == steps.c.id)
        .where(steps.c.department_id == department_id)
        .group_by(steps.c.id)
        .order_by(steps.c.position)
    ).mappings()
    return [StepTotals(to_step(row), row["deal_count"], int(row["total_volume"])) for row in rows]


# A summary's grouping rules, one definition for both of its readers: ``summary_rows`` (the
# resolvers) and the compiled read (``platform.reads``), which nests them in its statement. The
# period is bound (``summary_from``, ``summary_to``); ``in_scope`` says which departments count.
InScope = Callable[[ColumnElement[Any]], ColumnElement[bool]]


def summary_period(deal: FromClause) -> ColumnElement[bool]:
    """A summary's deals: created in [``summary_from``, ``summary_to``)."""
    moment = deals.c.created_at.type
    return (deal.c.created_at >= bindparam("summary_from", type_=moment)) & (
        deal.c.created_at < bindparam("summary_to", type_=moment)
    )


def volume_in(kind: str, deal: FromClause, step: FromClause) -> ColumnElement[Any]:
    """The volume of the deals now in a step of ``kind`` (won, lost), 0 for none."""
    return func.coalesce(func.sum(deal.c.volume).filter(step.c.kind == kind), 0)


def step_summaries(in_scope: InScope) -> Select[Any]:
    """Each step of the departments ``in_scope`` admits, with the period's deals now in it
    (``deal_count``, ``volume``), numbered in the summary's order (``ordinal``: by
    department, then position)."""
    in_period = (deals.c.step_id == steps.c.id) & summary_period(deals)
    return (
        select(
            *steps.c,
            func.count(deals.c.id).label("deal_count"),
            func.coalesce(func.sum(deals.c.volume), 0).label("volume"),
            func.row_number()
            .over(order_by=(steps.c.department_id, steps.c.position))
            .label("ordinal"),
        )
        .select_from(steps.outerjoin(deals, in_period))
        .where(in_scope(steps.c.department_id))
        .group_by(steps.c.id)
    )


def employee_summaries(in_scope: InScope) -> Select[Any]:
    """The period's deals (of the departments ``in_scope`` admits) by employee, the
    unassigned as a null employee: ``deal_count``, ``volume``, ``won_volume``,
    ``lost_volume``, numbered in the summary's order (``ordinal``: by name, the unassigned
    last)."""
    return (
        select(
            *employees.c,
            func.count(deals.c.id).label("deal_count"),
            func.coalesce(func.sum(deals.c.volume), 0).label("volume"),
            volume_in("won", deals, steps).label("won_volume"),
            volume_in("lost", deals, steps).label("lost_volume"),
            func.row_number()
            .over(order_by=(employees.c.name.nulls_last(), employees.c.id))
            .label("ordinal"),
        )
        .select_from(
            deals.join(steps, steps.c.id == deals.c.step_id).outerjoin(
                employees, employees.c.id == deals.c.employee_id
            )
        )
        .where(summary_period(deals), in_scope(deals.c.department_id))
        .group_by(employees.c.id)
    )


def summary_rows(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    created_from: datetime,
    created_to: datetime,
) -> tuple[list[StepSummary], list[EmployeeSummary]]:
    """Deals created in the range, grouped by step and by employee, in two statements."""

    def in_scope(department: ColumnElement[Any]) -> ColumnElement[bool]:
        return true() if department_id is None else department == department_id

    period = {"summary_from": created_from, "summary_to": created_to}
    by_step_rows = step_summaries(in_scope).subquery()
    step_rows = connection.execute(
        select(by_step_rows).order_by(by_step_rows.c.ordinal), period
    ).mappings()
    by_step = [
        StepSummary(to_step(row), row["deal_count"], int(row["volume"])) for row in step_rows
    ]
    by_employee_rows = employee_summaries(in_scope).subquery()
    employee_rows = connection.execute(
        select(by_employee_rows).order_by(by_employee_rows.c.ordinal), period
    ).mappings()
    by_employee = [
        EmployeeSummary(
            None if row["id"] is None else to_employee(row),
            row["deal_count"],
            int(row["volume"]),
            int(row["won_volume"]),
            int(row["lost_volume"]),
        )
        for row in employee_rows
    ]
    return by_step, by_employee


def all_departments(connection: TenantConnection) -> list[Department]:
    """Every department with its steps, in two statements."""
    rows = connection.execute(
        select(departments).order_by(departments.c.created_at, departments.c.id)
    ).mappings()
    found = {row["id"]: row for row in rows}
    step_rows = connection.execute(
        select(steps).order_by(steps.c.department_id, steps.c.position)
    ).mappings()
    steps_of: dict[uuid.UUID, list[Step]] = {department_id: [] for department_id in found}
    for step_row in step_rows:
        steps_of[step_row["department_id"]].append(to_step(step_row))
    return [
        Department(
            row["id"], row["name"], row["created_at"], row["updated_at"], tuple(steps_of[key])
        )
        for key, row in found.items()
    ]


def count_employees(connection: TenantConnection, department_id: uuid.UUID | None) -> int:
    query = (
        select(func.count()).select_from(employees).where(in_department(employees, department_id))
    )
    return int(connection.execute(query).scalar_one())
