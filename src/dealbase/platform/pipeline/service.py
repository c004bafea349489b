"""Departments and employees are set up by operators (CLI) today; integrations read them."""

from __future__ import annotations

import uuid

from dealbase.platform.errors import NotFound
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.pipeline import repository
from dealbase.platform.pipeline.models import (
    DEFAULT_STEPS,
    Department,
    DepartmentCreate,
    Employee,
    EmployeeCreate,
    EmployeeFilter,
    Step,
)
from dealbase.platform.validation import department_of
from dealbase.tenancy.database import UnitOfWork


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


def steps_in_order(uow: UnitOfWork) -> tuple[Step, ...]:
    return repository.list_steps(uow.connection, department_of(uow.scope))


def employees_page(uow: UnitOfWork, limit: int | None, cursor: str | None) -> Page[Employee]:
    filters = EmployeeFilter()
    page = page_request(limit, cursor, filters)
    rows = repository.list_employees(uow.connection, uow.scope.department_id, page)
    return page.page_of(rows, lambda employee: employee.id, filters)
