"""``dealbase department`` and ``dealbase employee``: a tenant's departments and their
employees."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from dealbase.ops import admin
from dealbase.ops.cli.common import (
    JsonFlag,
    TenantOption,
    command_database,
    command_group,
    emit,
    fail_cleanly,
    pick,
)

department_cli = command_group("Create departments.")
employee_cli = command_group("Create employees.")

DepartmentOption = Annotated[uuid.UUID, typer.Option("--department", help="Department id.")]


@department_cli.command("create")
@fail_cleanly
def department_create(name: str, tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """Create a department with the default pipeline; new deals start at its first step."""
    department = admin.create_department(command_database(), tenant, name)
    value = {
        "id": department.id,
        "name": department.name,
        "steps": [pick(step, "id", "name", "position") for step in department.steps],
    }
    emit(as_json, value, f"department {department.id} with {len(department.steps)} steps")


@employee_cli.command("create")
@fail_cleanly
def employee_create(
    name: str,
    tenant: TenantOption,
    department: DepartmentOption,
    email: Annotated[str | None, typer.Option(help="Email address.")] = None,
    as_json: JsonFlag = False,
) -> None:
    employee = admin.create_employee(command_database(), tenant, department, name, email)
    emit(as_json, pick(employee, "id", "name", "email", "department_id"), f"employee {employee.id}")
