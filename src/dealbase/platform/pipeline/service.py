"""Departments and employees are set up by operators (CLI) today; integrations read them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from dealbase.db.units import UnitOfWork
from dealbase.errors import Invalid, NotFound
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.pipeline import repository
from dealbase.platform.pipeline.models import (
    DEFAULT_STEPS,
    Department,
    DepartmentCreate,
    Employee,
    EmployeeCreate,
    EmployeeFilter,
    PipelineSummary,
    Step,
    StepTotals,
    SummaryRange,
)
from dealbase.platform.validation import department_of


def create_department(uow: UnitOfWork, fields: DepartmentCreate) -> Department:
    """A department with the default pipeline; its first step is where new deals start."""
    return repository.insert_department(uow.connection, fields.name, DEFAULT_STEPS)


def get_department(uow: UnitOfWork, department_id: uuid.UUID) -> Department:
    department = repository.get_department(uow.connection, department_id)
    if department is None or (
        uow.scope.department_id is not None and uow.scope.department_id != department_id
    ):
        raise NotFound(f"No department has the id {department_id}.")
    return department


def create_employee(uow: UnitOfWork, department_id: uuid.UUID, fields: EmployeeCreate) -> Employee:
    get_department(uow, department_id)
    return repository.insert_employee(uow.connection, department_id, fields.name, fields.email)


def first_department(uow: UnitOfWork) -> Department | None:
    return repository.first_department(uow.connection)


def first_employee(uow: UnitOfWork, department_id: uuid.UUID) -> Employee | None:
    return repository.first_employee(uow.connection, department_id)


def own_department(uow: UnitOfWork) -> Department:
    """The caller's department with its steps in order."""
    return get_department(uow, department_of(uow.scope))


def own_department_as_json(uow: UnitOfWork) -> str:
    """``own_department`` as ``GET /department`` shows it, JSON text made by PostgreSQL."""
    department_id = department_of(uow.scope)
    found = repository.department_as_json(uow.connection, department_id)
    if found is None:
        raise NotFound(f"No department has the id {department_id}.")
    return found


def steps_as_json(uow: UnitOfWork) -> str:
    """``steps_in_order`` as ``GET /steps`` shows them, JSON text made by PostgreSQL."""
    return repository.steps_as_json(uow.connection, department_of(uow.scope))


def steps_in_order(uow: UnitOfWork) -> tuple[Step, ...]:
    return repository.list_steps(uow.connection, department_of(uow.scope))


def employees_page(uow: UnitOfWork, limit: int | None, cursor: str | None) -> Page[Employee]:
    filters = EmployeeFilter()
    page = page_request(limit, cursor, filters)
    rows = repository.list_employees(uow.connection, uow.scope.department_id, page)
    return page.page_of(rows, lambda employee: employee.id, filters)


def board(uow: UnitOfWork) -> list[StepTotals]:
    """The caller's department's pipeline: each step with the count and volume of its deals."""
    return repository.step_totals(uow.connection, department_of(uow.scope))


def checked_period(period: SummaryRange) -> SummaryRange:
    """A summary's period, which must end after it starts."""
    if period.created_to <= period.created_from:
        raise Invalid.of(
            "created_to", "out_of_range", "The end of the period must be after its start."
        )
    return period


def summary(uow: UnitOfWork, period: SummaryRange) -> PipelineSummary:
    """Deals created in the period, for the caller's department (or the whole tenant)."""
    checked_period(period)
    by_step, by_employee = repository.summary_rows(
        uow.connection, uow.scope.department_id, period.created_from, period.created_to
    )
    return PipelineSummary(
        created_from=period.created_from,
        created_to=period.created_to,
        deal_count=sum(item.deal_count for item in by_employee),
        volume=sum(item.volume for item in by_employee),
        won_volume=sum(item.won_volume for item in by_employee),
        lost_volume=sum(item.lost_volume for item in by_employee),
        steps=tuple(by_step),
        employees=tuple(by_employee),
    )


def steps_by_ids(uow: UnitOfWork, step_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Step]:
    return repository.steps_by_ids(uow.connection, uow.scope.department_id, step_ids)


def employees_by_ids(
    uow: UnitOfWork, employee_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Employee]:
    return repository.employees_by_ids(uow.connection, uow.scope.department_id, employee_ids)


def departments_in_scope(uow: UnitOfWork) -> list[Department]:
    """Every department of the tenant for a tenant-wide caller; the caller's own otherwise."""
    if uow.scope.department_id is not None:
        return [own_department(uow)]
    return repository.all_departments(uow.connection)


def employee_count(uow: UnitOfWork) -> int:
    return repository.count_employees(uow.connection, uow.scope.department_id)
