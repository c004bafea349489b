"""The live context: once its operation has ended, a read on it (an execution another subscriber
shares, still running) takes a unit of work of its own, and leaves no transaction open."""

from __future__ import annotations

import asyncio

from dealbase.db.database import Database
from dealbase.graphql_api.subscriptions import LiveContext
from dealbase.platform.pipeline import service as pipeline
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld


def test_a_read_after_the_operation_ended_takes_a_unit_of_work_of_its_own(
    database: Database, world: TenantWorld
) -> None:
    scope = Scope.for_tenant(world.tenant.id).in_department(world.department.id)

    async def main() -> tuple[str, bool, bool]:
        context = LiveContext(request_id="r", caller=scope, database=database)
        await context.run(pipeline.own_department)
        held_while_running = context._reading is not None
        await context.finish()
        department = await context.run(pipeline.own_department)
        return department.name, held_while_running, context._reading is not None

    name, held_while_running, held_after = asyncio.run(main())
    assert name == world.department.name
    assert held_while_running
    assert not held_after
