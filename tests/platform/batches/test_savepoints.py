"""A batch operation's savepoint undoes everything the operation did, what it deferred to the
COMMIT included."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from dealbase.db.database import Database
from dealbase.db.units import UnitOfWork
from dealbase.errors import Conflict
from dealbase.platform.batches.service import savepoint
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.tables import customers as customers_table
from dealbase.platform.validation import validated
from tests.support import TenantWorld


def test_an_operation_rolled_back_to_its_savepoint_leaves_no_deferred_statement_behind(
    database: Database, world: TenantWorld
) -> None:
    scope = world.tenant.scope.in_department(world.department.id)

    def failing_operation(uow: UnitOfWork) -> None:
        with savepoint(uow):
            customers.create(uow, validated(CustomerFields, {"last_name": "Undone"}))
            # Would fail the COMMIT's round trip, were it still sent.
            uow.connection.defer(text("SELECT 1 / 0"), {})
            raise Conflict("the operation fails after deferring")

    with database.unit_of_work(scope) as uow:
        customers.create(uow, validated(CustomerFields, {"last_name": "Kept"}))
        with pytest.raises(Conflict):
            failing_operation(uow)

    with database.unit_of_work(scope) as uow:
        names = uow.connection.execute(select(customers_table.c.last_name)).all()
    assert names == [("Kept",)]
