"""The service against a tenant's own OpenAPI document (GET /api/v1/integration/openapi.json),
whose customers', deals' and activities' ``custom_fields`` are typed by the tenant's fields: the values
schemathesis generates there are valid ones, sent as they are (server_rules.py empties them only
for the public document's free object), and every default check holds. A case the document
accepts, typed custom values included, is accepted (200, 201); one it refuses is refused (422).

The tenant has a field of each type whose rules the document states exactly; not a decimal one,
whose document is a string of a decimal's pattern while the server also takes numbers and other
spellings of a decimal (``1e5``), which a negative case may draw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from contract_tests.batch_rules import BatchRule
from contract_tests.server_rules import DepartmentRows, ServerRules
from contract_tests.support import load_schema
from dealbase.db.database import Database
from dealbase.ops import admin
from tests.depth import DEPTH
from tests.support import TenantWorld, build_tenant

API = "/api/v1/integration"
OPTIONS = [{"label": "Gold"}, {"label": "Silver"}]
CUSTOMER_FIELDS: list[dict[str, Any]] = [
    {"name": "contract", "type": "text", "max_length": 40},
    {"name": "contact", "type": "email"},
    {"name": "home", "type": "url"},
    {"name": "seats", "type": "integer", "required": True},
    {"name": "vip", "type": "boolean"},
    {"name": "renewal", "type": "date"},
    {"name": "signed_at", "type": "timestamp"},
    {"name": "tier", "type": "single_select", "options": OPTIONS},
    {"name": "tags", "type": "multi_select", "options": OPTIONS},
]
DEAL_FIELDS: list[dict[str, Any]] = [
    {"name": "closes_on", "type": "date"},
    {"name": "probability", "type": "integer"},
]
ACTIVITY_FIELDS: list[dict[str, Any]] = [
    {"name": "minutes", "type": "integer"},
    {"name": "outcome", "type": "single_select", "options": OPTIONS},
]
# The operations whose bodies carry custom_fields; their responses show them.
OPERATIONS = [
    ("POST", "/customers"),
    ("PATCH", "/customers/{customer_id}"),
    ("PUT", "/customers/by-external-id/{external_id}"),
    ("POST", "/customers/batch"),
    ("POST", "/deals"),
    ("PATCH", "/deals/{deal_id}"),
    ("POST", "/activities"),
    ("PATCH", "/activities/{activity_id}"),
]
# An error naming a custom field: "custom_fields.seats", in a batch's results
# "operations[0].data.custom_fields.seats".
NAMES_A_CUSTOM_FIELD = re.compile(r'"field":\s*"([^"]*\.)?custom_fields\.')
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]


@dataclass(frozen=True)
class TypedTenant:
    """A tenant with custom fields, its own document loaded, and its department's rows."""

    world: TenantWorld
    schema: schemathesis.BaseSchema
    rules: ServerRules
    rows: DepartmentRows
    activity_id: str

    @property
    def headers(self) -> dict[str, str]:
        return self.world.key.headers


@pytest.fixture(scope="module")
def typed_tenant(contract_app: FastAPI, database: Database) -> TypedTenant:
    world = build_tenant(database)
    client = TestClient(contract_app)  # the lifespan already runs, in contract_app
    fields_key = {"X-Api-Key": admin.issue_key(database, world.tenant.id, None, "fields").api_key}
    records = (("customer", CUSTOMER_FIELDS), ("deal", DEAL_FIELDS), ("activity", ACTIVITY_FIELDS))
    for record, fields in records:
        for field in fields:
            body = {"record": record, "label": field["name"].title(), **field}
            defined = client.post(f"{API}/custom-fields", json=body, headers=fields_key)
            assert defined.status_code == 201, defined.text

    def created(collection: str, body: dict[str, Any]) -> str:
        response = client.post(f"{API}/{collection}", json=body, headers=world.key.headers)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    document = client.get(f"{API}/openapi.json", headers=world.key.headers)
    assert document.status_code == 200, document.text
    steps = client.get(f"{API}/steps", headers=world.key.headers).json()["data"]
    employee = admin.create_employee(database, world.tenant.id, world.department.id, "Eve", None)
    customer_id = created("customers", {"last_name": "Lovelace", "custom_fields": {"seats": 1}})
    rows = DepartmentRows(
        customer_id=customer_id,
        deal_id=created("deals", {"name": "Analytical engine"}),
        employee_id=str(employee.id),
        step_id=str(steps[0]["id"]),
    )
    schema = load_schema(document.json())
    schema.hooks.register_hook_with_name(
        BatchRule(document.json()).filter_failure, "filter_failure"
    )
    activity_id = created("activities", {"type": "call", "customer_id": customer_id})
    return TypedTenant(world, schema, ServerRules(document.json()), rows, activity_id)


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_generated_requests_with_typed_custom_values_are_answered_as_the_document_says(
    method: str, path: str, mode: schemathesis.GenerationMode, typed_tenant: TypedTenant
) -> None:
    rows = typed_tenant.rows
    ids = {
        "customer_id": rows.customer_id,
        "deal_id": rows.deal_id,
        "activity_id": typed_tenant.activity_id,
    }
    operation = typed_tenant.schema[API + path][method]
    fixed = {name: ids[name] for name in ids if f"{{{name}}}" in path}
    # Only cases that give custom fields values: the public document's suite fuzzes the rest.
    cases = operation.as_strategy(generation_mode=mode, path_parameters=fixed).filter(
        lambda case: _sets_custom_values(case.body)
    )
    # Each case's answer: whether the case (as adapted) is a positive one, its status, and
    # whether it names a custom field.
    answered: list[tuple[bool, int, bool]] = []

    @hypothesis.settings(
        max_examples=DEPTH.examples_per_operation,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=cases)
    def call(case: schemathesis.Case[Any]) -> None:
        typed_tenant.rules.adapt(case, rows, real_path_ids=True)
        # No `checks=`: the default set is the contract, and any failure raises.
        response = case.call_and_validate(headers=typed_tenant.headers)
        # schemathesis judges an adapted case again: a negative one only in what the rules
        # dropped (an upsert's If-Match) is positive now.
        positive = (case.meta.generation.mode if case.meta else mode).is_positive
        named = NAMES_A_CUSTOM_FIELD.search(response.text) is not None
        answered.append((positive, response.status_code, named))

    call()

    positives = {status for positive, status, _ in answered if positive}
    negatives = {status for positive, status, _ in answered if not positive}
    # 409: an external id drawn twice.
    assert positives <= {200, 201, 409}, answered
    # A batch answers 200, each operation whose data is wrong failed in its results
    # (batch_rules.py).
    assert negatives <= ({200, 422} if path.endswith("/batch") else {422}), answered
    if mode.is_positive:
        assert positives & {200, 201}, answered
    elif not path.endswith("/batch"):
        assert any(named for positive, _, named in answered if not positive), answered


def _sets_custom_values(body: object) -> bool:
    """Whether ``body`` (a record's, or a batch's) gives a custom field a value."""
    if isinstance(body, list):
        return any(map(_sets_custom_values, body))
    if not isinstance(body, dict):
        return False
    values = body.get("custom_fields")
    if isinstance(values, dict) and any(value is not None for value in values.values()):
        return True
    return any(map(_sets_custom_values, body.values()))
