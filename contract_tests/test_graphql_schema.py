"""The service against its own GraphQL schema: every query and mutation, fuzzed by schemathesis.

Every default check runs (response conformance, positive data accepted, negative data rejected),
with ``not_a_server_error`` in this service's terms (see ``graphql_support``): a 5xx, an
``INTERNAL`` error or an error without a code is a finding, and any finding fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from schemathesis.core.failures import ServerError
from schemathesis.core.result import Ok
from schemathesis.errors import FailureGroup
from schemathesis.graphql.checks import GraphQLServerError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contract_tests.graphql_support import (
    INTROSPECTION_QUERY,
    GraphQLInternalError,
    GraphQLRows,
    GraphQLRules,
    call_and_validate_graphql,
    import_time_introspection,
    load_graphql_schema,
)
from contract_tests.server_rules import PUBLIC_WEBHOOK_URL, DepartmentRows
from contract_tests.support import RowsExist
from dealbase.config import Settings
from dealbase.graphql_api.api import GRAPHQL_PATH
from dealbase.platform.tables import activities, webhook_endpoints
from tests.support import Credentials

INTROSPECTION = import_time_introspection()
schema = load_graphql_schema(INTROSPECTION)


@pytest.fixture(scope="session")
def graphql_rules(settings: Settings) -> GraphQLRules:
    return GraphQLRules(schema.client_schema, settings.graphql_max_cost)


@pytest.fixture(scope="session")
def graphql_rows(
    contract_app: FastAPI,
    contract_credentials: Credentials,
    contract_rows: Callable[[], DepartmentRows],
    rows_exist: RowsExist,
) -> Callable[[], GraphQLRows]:
    """The department's real rows; each call remakes one a mutation deleted.

    Customer, deal, employee and step come from ``contract_rows`` (which remakes its own); the
    activity, and a webhook endpoint with the delivery of a test event, are made here, through
    GraphQL.
    """
    client = TestClient(contract_app)  # the lifespan already runs, in contract_app
    headers = contract_credentials.headers

    def run(query: str) -> dict[str, Any]:
        response = client.post(GRAPHQL_PATH, json={"query": query}, headers=headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def new_activity(customer_id: str) -> str:
        body = run(
            f'mutation {{ createActivity(input: {{type: CALL, customerId: "{customer_id}"}})'
            " { id } }"
        )
        assert "errors" not in body, body
        return str(body["data"]["createActivity"]["id"])

    def new_webhook_delivery() -> tuple[str, str]:
        """An endpoint of the department and the delivery of a test event to it."""
        body = run(
            f'mutation {{ createWebhookEndpoint(input: {{url: "{PUBLIC_WEBHOOK_URL}",'
            ' events: ["*"]}) { endpoint { id } } }'
        )
        assert "errors" not in body, body
        endpoint_id = str(body["data"]["createWebhookEndpoint"]["endpoint"]["id"])
        body = run(f'mutation {{ sendTestWebhook(endpointId: "{endpoint_id}") {{ id }} }}')
        assert "errors" not in body, body
        return endpoint_id, str(body["data"]["sendTestWebhook"]["id"])

    activity_id = new_activity(contract_rows().customer_id)
    endpoint_id, delivery_id = new_webhook_delivery()

    def current() -> GraphQLRows:
        nonlocal activity_id, endpoint_id, delivery_id
        rows = contract_rows()
        activity, endpoint = rows_exist((activities, activity_id), (webhook_endpoints, endpoint_id))
        if not activity:
            activity_id = new_activity(rows.customer_id)
        if not endpoint:
            endpoint_id, delivery_id = new_webhook_delivery()
        return GraphQLRows(
            department_id=str(contract_credentials.department_id),
            customer_id=rows.customer_id,
            deal_id=rows.deal_id,
            employee_id=rows.employee_id,
            step_id=rows.step_id,
            activity_id=activity_id,
            webhook_endpoint_id=endpoint_id,
            webhook_delivery_id=delivery_id,
        )

    return current


def test_the_suite_fuzzes_the_schema_the_session_app_serves(
    contract_app: FastAPI, contract_credentials: Credentials
) -> None:
    # The schema below is built at import time without a database; this pins it to the one the
    # suite actually calls.
    response = TestClient(contract_app).post(
        GRAPHQL_PATH, json={"query": INTROSPECTION_QUERY}, headers=contract_credentials.headers
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"] == INTROSPECTION


def test_every_query_and_mutation_is_fuzzed() -> None:
    labels = set()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        labels.add(result.ok().label)
    query_type = schema.client_schema.query_type
    mutation_type = schema.client_schema.mutation_type
    assert query_type is not None
    assert mutation_type is not None
    assert labels == {f"Query.{name}" for name in query_type.fields} | {
        f"Mutation.{name}" for name in mutation_type.fields
    }
    assert len(labels) == 40


@pytest.mark.usefixtures("contract_app")
@schema.parametrize()
def test_every_query_and_mutation_conforms_to_the_graphql_schema(
    case: schemathesis.Case[Any],
    contract_credentials: Credentials,
    graphql_rows: Callable[[], GraphQLRows],
    graphql_rules: GraphQLRules,
) -> None:
    graphql_rules.adapt(case, graphql_rows())
    call_and_validate_graphql(case, contract_credentials.headers)


# The server-error check must be able to fail: the same validation, against a stand-in server
# that answers with a planted body.

CUSTOMER_QUERY = '{ customer(id: "00000000-0000-4000-8000-000000000000") { id } }'
NOT_FOUND = {
    "message": "No customer has the id 00000000-0000-4000-8000-000000000000.",
    "locations": [{"line": 1, "column": 3}],
    "path": ["customer"],
    "extensions": {"code": "not_found"},
}


def _answering(status: int, body: dict[str, Any]) -> schemathesis.Case[Any]:
    """A ``Query.customer`` case whose server always answers ``status`` and ``body``."""

    async def graphql_endpoint(request: Request) -> JSONResponse:
        return JSONResponse(body, status_code=status)

    stand_in = Starlette(routes=[Route(GRAPHQL_PATH, graphql_endpoint, methods=["POST"])])
    return load_graphql_schema(INTROSPECTION, app=stand_in)["Query"]["customer"].Case(
        body=CUSTOMER_QUERY
    )


def _failures(case: schemathesis.Case[Any]) -> list[BaseException]:
    with pytest.raises(FailureGroup) as raised:
        call_and_validate_graphql(case, {})
    return list(raised.value.exceptions)


def test_an_internal_error_is_a_finding() -> None:
    internal = {
        "message": "Internal error; the request id identifies it to support.",
        "locations": [{"line": 1, "column": 3}],
        "path": ["customer"],
        "extensions": {"code": "INTERNAL", "request_id": "req-1"},
    }

    failures = _failures(_answering(200, {"data": None, "errors": [internal]}))

    found = [failure for failure in failures if isinstance(failure, GraphQLInternalError)]
    assert len(found) == 1, failures
    assert found[0].errors == [internal]
    assert "INTERNAL" in str(found[0])


def test_an_internal_error_beside_domain_errors_is_a_finding() -> None:
    internal = {
        "message": "Internal error.",
        "path": ["customer"],
        "extensions": {"code": "INTERNAL"},
    }
    body = {"data": None, "errors": [NOT_FOUND, internal]}

    found = [f for f in _failures(_answering(200, body)) if isinstance(f, GraphQLInternalError)]

    assert [failure.errors for failure in found] == [[internal]]


def test_an_error_without_a_code_is_a_finding() -> None:
    unclassified = {"message": "boom", "path": ["customer"]}

    found = [
        failure
        for failure in _failures(_answering(200, {"data": None, "errors": [unclassified]}))
        if isinstance(failure, GraphQLInternalError)
    ]

    assert [failure.errors for failure in found] == [[unclassified]]


def test_a_5xx_is_a_finding() -> None:
    failures = _failures(_answering(500, {"detail": "Internal Server Error"}))

    assert [f.status_code for f in failures if isinstance(f, ServerError)] == [500], failures


def test_a_documented_domain_error_is_not_a_finding() -> None:
    # The built-in check would report it (ST113, "GraphQL server error"): it calls every error
    # with a `path` a server error unless it carries an Apollo or graphql-java marker. That is why
    # the suite runs the service's own server-error check in its place.
    case = _answering(200, {"data": None, "errors": [NOT_FOUND]})

    response = call_and_validate_graphql(case, {})
    with pytest.raises(FailureGroup) as raised:
        case.validate_response(response)

    assert json.loads(response.content)["errors"] == [NOT_FOUND]
    assert [type(failure) for failure in raised.value.exceptions] == [GraphQLServerError]
