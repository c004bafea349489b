"""A tenant's departments, their steps and employees, the board and the summary: their types
(the platform's read models, ``types.read_type``) and queries."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from datetime import datetime
from enum import Enum
from typing import Any

import strawberry

from dealbase.graphql_api import loaders
from dealbase.graphql_api.types import (
    NESTED_DEFAULT,
    BigInt,
    Connection,
    GraphQLInfo,
    LazyDeal,
    connection,
    listed,
    now_or_later,
    read_type,
    settled,
)
from dealbase.platform.deals.models import Deal as DealModel
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE, page_size
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.pipeline.models import Department as DepartmentModel
from dealbase.platform.pipeline.models import Employee as EmployeeModel
from dealbase.platform.pipeline.models import EmployeeSummary as EmployeeSummaryModel
from dealbase.platform.pipeline.models import PipelineSummary as PipelineSummaryModel
from dealbase.platform.pipeline.models import Step as StepModel
from dealbase.platform.pipeline.models import StepSummary as StepSummaryModel
from dealbase.platform.pipeline.models import StepTotals, SummaryRange
from dealbase.platform.validation import validated


@strawberry.enum
class StepKind(Enum):
    OPEN = "open"
    WON = "won"
    LOST = "lost"


@read_type(StepModel)
class Step:
    kind = strawberry.field(graphql_type=StepKind)


@read_type(EmployeeModel)
class Employee:
    pass


def employee_of(
    info: GraphQLInfo, employee_id: uuid.UUID | None
) -> EmployeeModel | Awaitable[EmployeeModel | None] | None:
    """The employee a deal or an activity is assigned to, through the request's loader."""
    if employee_id is None:
        return None
    return settled(loaders.employee(info.context, employee_id))


@read_type(DepartmentModel, leading=("id", "name", "steps"))
class Department:
    steps = strawberry.field(graphql_type=list[Step])


def deals_in_step(
    totals: strawberry.Parent[StepTotals], info: GraphQLInfo, first: int = NESTED_DEFAULT
) -> list[DealModel] | Awaitable[list[DealModel]]:
    found = loaders.deals_of_step(info.context, totals.step.id, page_size(first))
    return now_or_later(found, listed)


@read_type(StepTotals)
class PipelineStep:
    step = strawberry.field(graphql_type=Step)
    total_volume = strawberry.field(graphql_type=BigInt)
    deals = strawberry.field(
        resolver=deals_in_step,
        description="The step's first deals, oldest first.",
        graphql_type=list[LazyDeal],
    )


@read_type(StepSummaryModel)
class StepSummary:
    step = strawberry.field(graphql_type=Step)
    volume = strawberry.field(graphql_type=BigInt)


@read_type(EmployeeSummaryModel)
class EmployeeSummary:
    employee = strawberry.field(
        graphql_type=Employee | None, description="null: the unassigned deals."
    )
    volume = strawberry.field(graphql_type=BigInt)
    won_volume = strawberry.field(graphql_type=BigInt)
    lost_volume = strawberry.field(graphql_type=BigInt)


@read_type(
    PipelineSummaryModel,
    description="Deals created in [createdFrom, createdTo), by the step they are in now and by"
    " employee; won and lost count the deals now in a step of that kind.",
)
class PipelineSummary:
    volume = strawberry.field(graphql_type=BigInt)
    won_volume = strawberry.field(graphql_type=BigInt)
    lost_volume = strawberry.field(graphql_type=BigInt)
    steps = strawberry.field(graphql_type=list[StepSummary])
    employees = strawberry.field(graphql_type=list[EmployeeSummary])


@strawberry.type
class Pipeline:
    department: DepartmentModel = strawberry.field(graphql_type=Department)
    steps: list[StepTotals] = strawberry.field(graphql_type=list[PipelineStep])


@strawberry.type
class PipelineQuery:
    @strawberry.field(
        description="The caller's department, or every one for a tenant-wide key.",
        graphql_type=list[Department],
    )
    async def departments(self, info: GraphQLInfo) -> list[DepartmentModel]:
        return await info.context.run(pipeline.departments_in_scope)

    @strawberry.field(graphql_type=Connection[Employee])
    async def employees(
        self,
        info: GraphQLInfo,
        department_id: uuid.UUID | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[EmployeeModel]:
        scope = await info.context.scope_in(department_id)
        page = await info.context.run(lambda uow: pipeline.employees_page(uow, first, after), scope)

        async def count() -> int:
            return await info.context.run(pipeline.employee_count, scope)

        return connection(page, count)

    @strawberry.field(
        description="A department's steps in order (a tenant-wide key names one).",
        graphql_type=list[Step],
    )
    async def steps(
        self, info: GraphQLInfo, department_id: uuid.UUID | None = None
    ) -> list[StepModel]:
        scope = await info.context.scope_in(department_id)
        return list(await info.context.run(pipeline.steps_in_order, scope))

    @strawberry.field(
        description="A department's board: each step with its deals' count and volume."
    )
    async def pipeline(self, info: GraphQLInfo, department_id: uuid.UUID | None = None) -> Pipeline:
        scope = await info.context.scope_in(department_id)

        def board(uow: Any) -> tuple[Any, Any]:
            return pipeline.own_department(uow), pipeline.board(uow)

        department, totals = await info.context.run(board, scope)
        return Pipeline(department=department, steps=totals)

    @strawberry.field(graphql_type=PipelineSummary)
    async def pipeline_summary(
        self,
        info: GraphQLInfo,
        created_from: datetime,
        created_to: datetime,
        department_id: uuid.UUID | None = None,
    ) -> PipelineSummaryModel:
        scope = await info.context.scope_in(department_id)
        period = validated(SummaryRange, {"created_from": created_from, "created_to": created_to})
        return await info.context.run(lambda uow: pipeline.summary(uow, period), scope)
