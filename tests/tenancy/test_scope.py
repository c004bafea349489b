"""The Scope's ids as log lines name them."""

from __future__ import annotations

import uuid

from dealbase.tenancy.scope import Scope


def test_a_scope_logs_its_ids_as_text_and_none_for_those_it_lacks() -> None:
    tenant = Scope.for_tenant(uuid.uuid4())

    assert tenant.logged_ids() == {
        "tenant_id": str(tenant.tenant_id),
        "department_id": None,
        "key_id": None,
    }


def test_a_scope_moved_to_a_department_logs_that_department() -> None:
    tenant = Scope.for_tenant(uuid.uuid4())
    tenant.logged_ids()
    department = uuid.uuid4()

    moved = tenant.in_department(department)

    assert moved.logged_ids()["department_id"] == str(department)
    assert moved == Scope(tenant.tenant_id, tenant.schema, department)
