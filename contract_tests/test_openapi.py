"""The service against its own OpenAPI document, with every default schemathesis check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI
from schemathesis.errors import FailureGroup
from schemathesis.openapi.checks import JsonSchemaError
from sqlalchemy import delete

from contract_tests.batch_rules import BatchRule
from contract_tests.server_rules import DepartmentRows, ServerRules
from contract_tests.support import import_time_document, load_schema, served_document
from dealbase.db.database import Database
from dealbase.platform.tables import (
    activities,
    customers,
    deal_customers,
    deals,
    idempotency_records,
)
from tests.depth import DEPTH
from tests.support import Credentials, TenantWorld

DOCUMENT = import_time_document()
schema = load_schema(DOCUMENT)
SERVER_RULES = ServerRules(DOCUMENT)
# Each batch operation's data is judged on its own: a batch negative only there is answered 200.
schema.hooks.register_hook_with_name(BatchRule(DOCUMENT).filter_failure, "filter_failure")

CUSTOMERS = "/api/v1/integration/customers"
DEALS = "/api/v1/integration/deals"


def test_the_suite_fuzzes_the_document_the_session_app_serves(contract_app: FastAPI) -> None:
    # The schema below is read at import time from a database-less app; this pins it to the one
    # the suite actually calls.
    assert served_document(contract_app) == DOCUMENT


@pytest.mark.usefixtures("contract_app")
@schema.parametrize()
def test_every_operation_conforms_to_the_openapi_document(
    case: schemathesis.Case[Any],
    contract_credentials: Credentials,
    contract_rows: Callable[[], DepartmentRows],
) -> None:
    # Here rather than in schemathesis hooks: the examples phase skips case hooks, and the
    # coverage phase runs them at collection, before the department's rows exist.
    SERVER_RULES.adapt(case, contract_rows())
    # No `checks=`: the default set is the contract, and any failure raises.
    case.call_and_validate(headers=contract_credentials.headers)


@pytest.mark.usefixtures("contract_app")
@pytest.mark.parametrize(
    ("collection", "id_parameter"), [(CUSTOMERS, "customer_id"), (DEALS, "deal_id")]
)
def test_reading_back_a_created_resource_conforms_to_the_openapi_document(
    collection: str, id_parameter: str, contract_credentials: Credentials
) -> None:
    # Generated ids for GET are random and only ever reach the 404 branch; this pins the 200.
    create = schema[collection]["POST"]
    example = DOCUMENT["paths"][collection]["post"]["requestBody"]["content"]["application/json"]
    created = create.Case(body=example["example"], media_type="application/json")
    response = created.call_and_validate(headers=contract_credentials.headers)
    assert response.status_code == 201

    read = schema[f"{collection}/{{{id_parameter}}}"]["GET"].Case(
        path_parameters={id_parameter: response.json()["id"]}
    )
    assert read.call_and_validate(headers=contract_credentials.headers).status_code == 200


@pytest.mark.usefixtures("contract_app")
def test_response_schema_check_reports_a_customer_whose_last_name_breaks_the_document(
    contract_credentials: Credentials,
) -> None:
    """A planted lie in the document must surface, or a green suite would prove nothing."""
    document: dict[str, Any] = copy.deepcopy(DOCUMENT)
    document["components"]["schemas"]["CustomerOut"]["properties"]["last_name"] = {
        "type": "integer"
    }
    case = load_schema(document)[CUSTOMERS]["POST"].Case(
        body={"last_name": "Lovelace"}, media_type="application/json"
    )

    with pytest.raises(FailureGroup) as raised:
        case.call_and_validate(headers=contract_credentials.headers)

    violations = [
        failure
        for failure in raised.value.exceptions
        if isinstance(failure, JsonSchemaError) and list(failure.instance_path) == ["last_name"]
    ]
    assert violations, raised.value.exceptions
    assert violations[0].instance == "Lovelace"


# Calls per sequence the state machine runs (their number is the profile's, tests/depth.py):
# enough to chain create -> read -> update -> delete over the inferred links.
STATEFUL_STEPS = 8


def test_each_create_links_to_the_operations_on_what_it_created() -> None:
    # The stateful phase follows these links (and schemathesis's inferred ones besides).
    paths = DOCUMENT["paths"]
    links = {
        collection: sorted(paths[collection]["post"]["responses"]["201"].get("links", {}))
        for collection in ("/api/v1/integration/customers", DEALS, "/api/v1/integration/activities")
    }

    assert links == {
        "/api/v1/integration/customers": ["delete_customer", "get_customer", "update_customer"],
        DEALS: ["delete_deal", "get_deal", "link_customer", "update_deal"],
        "/api/v1/integration/activities": ["delete_activity", "get_activity", "update_activity"],
    }


@pytest.mark.usefixtures("contract_app")
def test_chains_of_calls_along_the_links_conform_to_the_openapi_document(
    contract_credentials: Credentials,
    contract_rows: Callable[[], DepartmentRows],
    contract_world: TenantWorld,
    database: Database,
) -> None:
    machine = schema.as_state_machine()

    class ContractStateMachine(machine):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            # Every sequence starts from the same data: hypothesis replays a sequence's choices
            # and requires the same draws, and a draw from a response (a list's length, which
            # links are live) changes with what earlier sequences left behind.
            _empty_the_department(database, contract_world)
            super().setup()

        def before_call(self, case: schemathesis.Case[Any]) -> None:
            SERVER_RULES.adapt(case, contract_rows(), real_path_ids=True)
            super().before_call(case)

        def get_call_kwargs(self, case: schemathesis.Case[Any]) -> dict[str, Any]:
            return {"headers": contract_credentials.headers}

    ContractStateMachine.run(
        settings=hypothesis.settings(
            max_examples=DEPTH.stateful_sequences,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
    )


def _empty_the_department(database: Database, world: TenantWorld) -> None:
    """The customers, deals, activities and idempotency records of the contract tenant, gone."""
    with database.unit_of_work(world.tenant.scope) as uow:
        for table in (activities, deal_customers, deals, customers, idempotency_records):
            uow.connection.execute(delete(table))
