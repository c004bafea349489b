from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dealbase.platform.validation import ClientInput, EmailText, Moment, RequiredShortText

StepKind = Literal["open", "won", "lost"]

# The pipeline every new department starts with; new deals enter at the first step.
DEFAULT_STEPS: tuple[tuple[str, StepKind], ...] = (
    ("Lead", "open"),
    ("Qualified", "open"),
    ("Proposal", "open"),
    ("Negotiation", "open"),
    ("Won", "won"),
    ("Lost", "lost"),
)


@dataclass(frozen=True, slots=True)
class Step:
    id: uuid.UUID
    department_id: uuid.UUID
    name: str
    position: int
    kind: StepKind


@dataclass(frozen=True, slots=True)
class Department:
    id: uuid.UUID
    name: str
    created_at: datetime
    updated_at: datetime
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Employee:
    id: uuid.UUID
    department_id: uuid.UUID
    name: str
    email: str | None
    created_at: datetime
    updated_at: datetime


class DepartmentCreate(ClientInput):
    name: RequiredShortText


class EmployeeCreate(ClientInput):
    name: RequiredShortText
    email: EmailText | None = None


class EmployeeFilter(BaseModel):
    """No filters yet; it keeps a cursor tied to the kind of list it came from."""

    model_config = ConfigDict(frozen=True)


@dataclass(frozen=True, slots=True)
class StepTotals:
    """A step of the board with the deals now in it."""

    step: Step
    deal_count: int
    total_volume: int


@dataclass(frozen=True, slots=True)
class StepSummary:
    step: Step
    deal_count: int
    volume: int


@dataclass(frozen=True, slots=True)
class EmployeeSummary:
    """Deals assigned to one employee; ``employee`` None stands for the unassigned ones."""

    employee: Employee | None
    deal_count: int
    volume: int
    won_volume: int
    lost_volume: int


@dataclass(frozen=True, slots=True)
class PipelineSummary:
    """Deals created in [created_from, created_to), by the step they are in now and by employee;
    won and lost are the deals now in a step of that kind."""

    created_from: datetime
    created_to: datetime
    deal_count: int
    volume: int
    won_volume: int
    lost_volume: int
    steps: tuple[StepSummary, ...]
    employees: tuple[EmployeeSummary, ...]


class SummaryRange(ClientInput):
    created_from: Moment
    created_to: Moment
