"""The rules of creates and upserts by external id (``batches/upserts.py``): the judging
statement of subqueries that a distributed schema runs (Citus routes it whole, where it makes a
subplan of the CTE that locks the records) judges every write as the statement of CTEs does."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from dealbase.db.database import Database
from dealbase.platform.activities import service as activities
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.batches import upserts
from dealbase.platform.batches.models import Write
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.versioning import Expected
from tests.support import TenantWorld


def _writes(plural: str, customer_id: uuid.UUID) -> list[Write[Any]]:
    """One write of each verdict: a new record, a change, no change, a create of a taken
    external id, If-Match without a record, If-None-Match and If-Match against its version,
    and (an activity's) a change to a customer of no department's."""

    def fields(label: str, **more: Any) -> Any:
        if plural == "customers":
            return CustomerFields(last_name=label, **more)
        return ActivityFields(type="call", subject=label, customer_id=customer_id, **more)

    label = "last_name" if plural == "customers" else "subject"

    def upsert(index: int, external_id: str, value: str, **conditions: Any) -> Write[Any]:
        given = frozenset({label} | ({"customer_id"} if plural == "activities" else set()))
        return Write(index, True, external_id, fields(value), given, **conditions)

    writes = [
        upsert(0, "new", "N"),
        upsert(1, "kept", "Changed"),
        upsert(2, "same", "Same"),
        Write(3, False, "same", fields("Twin", external_id="same"), frozenset({label})),
        upsert(4, "missing", "M", expected=Expected(None)),
        upsert(5, "kept", "U", unless=Expected(frozenset({1}))),
        upsert(6, "same", "E", expected=Expected(frozenset({7}))),
    ]
    if plural == "activities":
        unknown = ActivityFields(type="call", subject="Same", customer_id=uuid.uuid4())
        writes.append(Write(7, True, "other", unknown, frozenset({"subject", "customer_id"})))
    return writes


@pytest.mark.parametrize("plural", ["customers", "activities"])
def test_the_routed_judging_statement_judges_as_the_single_servers(
    database: Database, world: TenantWorld, plural: str
) -> None:
    record = customers.RECORD if plural == "customers" else activities.RECORD
    scope = world.tenant.scope.in_department(world.department.id)
    with database.unit_of_work(scope) as uow:
        customer_id = customers.create(uow, CustomerFields(last_name="Owner")).id
        for external_id, label in (("kept", "Kept"), ("same", "Same"), ("other", "Other")):
            if plural == "customers":
                customers.create(uow, CustomerFields(last_name=label, external_id=external_id))
            else:
                activities.create(
                    uow,
                    ActivityFields(
                        type="call", subject=label, customer_id=customer_id, external_id=external_id
                    ),
                )
    writes = _writes(plural, customer_id)

    with database.unit_of_work(scope) as uow:
        values = upserts.parameters(
            record.judging, writes, world.department.id, world.tenant.id
        ).values
        judged = [
            list(uow.connection.execute(statement, values).mappings())
            for statement in (
                upserts.judged_statement(record.judging),
                upserts.judged_statement(record.judging, routed=True),
            )
        ]

    assert judged[0] == judged[1]
    verdicts = [row["verdict"] for row in judged[1]]
    assert verdicts[:7] == [
        upserts.INSERT,
        upserts.CHANGE,
        upserts.UNCHANGED,
        upserts.TAKEN,
        upserts.MISSING,
        upserts.UNLESS,
        upserts.NOT_EXPECTED,
    ]
    if plural == "activities":
        assert (verdicts[7], judged[1][7]["known_customer_id"]) == (upserts.CHANGE, False)
