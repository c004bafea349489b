"""Read-only views of the caller's department: its pipeline steps and its employees."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from dealbase.edge.callers import AdmittedRoute, caller_of
from dealbase.edge.database import database_of
from dealbase.platform.pipeline import service
from dealbase.rest_api.openapi import LIST_CURSOR, LIST_LIMIT, problem_responses
from dealbase.rest_api.responses import page_response
from dealbase.rest_api.schemas import DepartmentOut, EmployeeList, StepList

router = APIRouter(tags=["pipeline"], route_class=AdmittedRoute)


@router.get(
    "/department",
    summary="Read the caller's department",
    description="The department the key was issued for, with its pipeline steps in order.",
    response_model=None,
    responses={
        200: {"model": DepartmentOut, "description": "The department and its steps."},
        **problem_responses(401, 403),
    },
)
async def get_department(request: Request) -> Response:
    scope = caller_of(request)
    text = await database_of(request).read(scope, service.own_department_as_json)
    return Response(text.encode(), media_type="application/json")


@router.get(
    "/steps",
    summary="List the department's pipeline steps",
    description="In pipeline order; new deals start in the first.",
    response_model=None,
    responses={
        200: {"model": StepList, "description": "Every step, in order."},
        **problem_responses(401, 403),
    },
)
async def list_steps(request: Request) -> Response:
    scope = caller_of(request)
    text = await database_of(request).read(scope, service.steps_as_json)
    return Response(text.encode(), media_type="application/json")


@router.get(
    "/employees",
    summary="List the department's employees",
    description="The department's employees, oldest first, a page at a time.",
    response_model=None,
    responses={
        200: {"model": EmployeeList, "description": "A page of employees."},
        **problem_responses(401, 403, 422),
    },
)
async def list_employees(
    request: Request,
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
) -> Response:
    scope = caller_of(request)
    page = await database_of(request).run(
        scope, lambda uow: service.employees_page(uow, limit, cursor)
    )
    return page_response(EmployeeList, page)
