"""A unit of work that lost a race its statement could not settle (``RunAgain``) is rolled back
and run again by ``Database.run`` (and ``run_here``), at most ``RUNS`` times in all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.db.units import RUNS, RunAgain, UnitOfWork
from dealbase.errors import ExternalIdTaken
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.tables import customers as customers_table
from tests.support import TenantWorld

Run = Callable[[Database, TenantWorld, Callable[[UnitOfWork], int]], int]


def _on_the_event_loop(
    database: Database, world: TenantWorld, work: Callable[[UnitOfWork], int]
) -> int:
    scope = world.tenant.scope.in_department(world.department.id)
    return asyncio.run(database.run(scope, work))


def _here(database: Database, world: TenantWorld, work: Callable[[UnitOfWork], int]) -> int:
    return database.run_here(world.tenant.scope.in_department(world.department.id), work)


@pytest.fixture(params=[_on_the_event_loop, _here], ids=["run", "run_here"])
def run(request: pytest.FixtureRequest) -> Run:
    runner: Run = request.param
    return runner


def _customers(database: Database, world: TenantWorld) -> int:
    with database.unit_of_work(world.tenant.scope) as uow:
        return int(
            uow.connection.execute(select(func.count()).select_from(customers_table)).scalar_one()
        )


def _writing_then_losing(losses: int) -> tuple[Callable[[UnitOfWork], int], list[int]]:
    """Work that creates a customer, then loses a race its first ``losses`` runs."""
    runs: list[int] = []

    def work(uow: UnitOfWork) -> int:
        runs.append(len(runs) + 1)
        customers.create(uow, CustomerFields(last_name=f"Run {len(runs)}"))
        if len(runs) <= losses:
            raise RunAgain(ExternalIdTaken("lost"))
        return len(runs)

    return work, runs


def test_a_unit_of_work_that_loses_races_runs_again_and_keeps_only_its_last_run(
    database: Database, world: TenantWorld, run: Run
) -> None:
    work, runs = _writing_then_losing(RUNS - 1)

    assert run(database, world, work) == RUNS

    assert runs == list(range(1, RUNS + 1))
    assert _customers(database, world) == 1


def test_a_unit_of_work_that_loses_every_run_answers_the_last_ones_outcome(
    database: Database, world: TenantWorld, run: Run
) -> None:
    work, runs = _writing_then_losing(RUNS)

    with pytest.raises(ExternalIdTaken, match="lost"):
        run(database, world, work)

    assert len(runs) == RUNS
    assert _customers(database, world) == 0
