from __future__ import annotations

import uuid

from sqlalchemy import Connection, RowMapping, exists, func, insert, select

from dealbase.platform.ids import new_id
from dealbase.platform.pagination import PageRequest
from dealbase.platform.pipeline.models import Department, Employee, Step, StepKind
from dealbase.platform.rows import in_department
from dealbase.platform.tables import departments, employees, steps


def _step(row: RowMapping) -> Step:
    return Step(row["id"], row["department_id"], row["name"], row["position"], row["kind"])


def _employee(row: RowMapping) -> Employee:
    return Employee(
        row["id"],
        row["department_id"],
        row["name"],
        row["email"],
        row["created_at"],
        row["updated_at"],
    )


def insert_department(
    connection: Connection, name: str, pipeline: tuple[tuple[str, StepKind], ...]
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
            insert(steps).returning(*steps.c, sort_by_parameter_order=True),
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
        tuple(_step(row) for row in step_rows),
    )


def get_department(connection: Connection, department_id: uuid.UUID) -> Department | None:
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


def list_steps(connection: Connection, department_id: uuid.UUID) -> tuple[Step, ...]:
    rows = connection.execute(
        select(steps).where(steps.c.department_id == department_id).order_by(steps.c.position)
    ).mappings()
    return tuple(_step(row) for row in rows)


def insert_employee(
    connection: Connection, department_id: uuid.UUID, name: str, email: str | None
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
    return _employee(row)


def first_department(connection: Connection) -> Department | None:
    department_id = connection.execute(
        select(departments.c.id).order_by(departments.c.created_at, departments.c.id).limit(1)
    ).scalar_one_or_none()
    return None if department_id is None else get_department(connection, department_id)


def first_employee(connection: Connection, department_id: uuid.UUID) -> Employee | None:
    row = (
        connection.execute(
            select(employees)
            .where(employees.c.department_id == department_id)
            .order_by(employees.c.created_at, employees.c.id)
            .limit(1)
        )
        .mappings()
        .first()
    )
    return None if row is None else _employee(row)


def step_in_department(
    connection: Connection, department_id: uuid.UUID, step_id: uuid.UUID
) -> bool:
    return connection.execute(
        select(exists().where(steps.c.id == step_id, steps.c.department_id == department_id))
    ).scalar_one()


def employee_in_department(
    connection: Connection, department_id: uuid.UUID, employee_id: uuid.UUID
) -> bool:
    return connection.execute(
        select(
            exists().where(
                employees.c.id == employee_id, employees.c.department_id == department_id
            )
        )
    ).scalar_one()


def list_employees(
    connection: Connection, department_id: uuid.UUID | None, page: PageRequest
) -> list[Employee]:
    query = select(employees).where(in_department(employees, department_id))
    if page.after is not None:
        query = query.where(employees.c.id > page.after)
    rows = connection.execute(query.order_by(employees.c.id).limit(page.limit + 1)).mappings()
    return [_employee(row) for row in rows]
