"""The batch rule the contract runs apply (batch_rules.py), against the real app's answers: a
batch negative only in its operations' data is answered by the rule when those operations failed
422, and by nothing else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from contract_tests.batch_rules import BatchRule
from contract_tests.support import import_time_document
from tests.support import Credentials

RULE = BatchRule(import_time_document())
BATCH = "/api/v1/integration/customers/batch"
# The first operation's data has no last_name: it breaks CustomerFields.
BATCH_WITH_BROKEN_DATA = {
    "operations": [
        {"op": "create", "data": {"city": "London"}},
        {"op": "create", "data": {"last_name": "Lovelace"}},
    ]
}


def _sent(app: FastAPI, credentials: Credentials, body: dict[str, Any]) -> schemathesis.Response:
    answer = TestClient(app).post(BATCH, json=body, headers=credentials.headers)
    return schemathesis.Response.from_any(answer)


def _answered(body: dict[str, Any]) -> schemathesis.Response:
    """A 200 with ``body``, which the server did not send."""
    made_up = httpx.Response(200, json=body, request=httpx.Request("POST", f"http://test{BATCH}"))
    made_up.elapsed = timedelta(0)
    return schemathesis.Response.from_any(made_up)


@pytest.fixture
def answer(contract_app: FastAPI, contract_credentials: Credentials) -> schemathesis.Response:
    return _sent(contract_app, contract_credentials, BATCH_WITH_BROKEN_DATA)


def test_broken_data_that_failed_its_operation_422_is_the_rule(
    answer: schemathesis.Response,
) -> None:
    results = answer.json()["results"]
    assert [(result["outcome"], result["status"]) for result in results] == [
        ("failed", 422),
        ("created", 201),
    ]

    assert RULE.answered_per_operation(BATCH, BATCH_WITH_BROKEN_DATA, answer)


def test_broken_data_that_was_applied_breaks_the_rule(answer: schemathesis.Response) -> None:
    applied = answer.json()
    applied["results"][0] = applied["results"][1]

    assert not RULE.answered_per_operation(BATCH, BATCH_WITH_BROKEN_DATA, _answered(applied))


def test_a_batch_broken_beside_its_data_breaks_the_rule_though_answered_200(
    answer: schemathesis.Response,
) -> None:
    unknown_op = {"operations": [{"op": "replace", "data": {"last_name": "Lovelace"}}]}
    extra_member = {**BATCH_WITH_BROKEN_DATA, "atomically": True}

    for body in (unknown_op, extra_member):
        assert not RULE.answered_per_operation(BATCH, body, answer), body


def test_a_batch_answered_other_than_200_is_not_the_rule(
    contract_app: FastAPI, contract_credentials: Credentials
) -> None:
    no_operations: dict[str, Any] = {"operations": []}
    refused = _sent(contract_app, contract_credentials, no_operations)

    assert refused.status_code == 422
    assert not RULE.answered_per_operation(BATCH, BATCH_WITH_BROKEN_DATA, refused)


def test_a_batch_whose_documented_parameters_are_invalid_breaks_the_rule() -> None:
    unknown_parameters = RULE.parameters_as_documented(
        BATCH, {"unknown": "x"}, {"Idempotency-Key": "order-1", "X-Other": "y"}
    )
    long_key = RULE.parameters_as_documented(BATCH, {}, {"idempotency-key": "k" * 256})
    not_a_boolean = RULE.parameters_as_documented(BATCH, {"atomic": "maybe"}, {})

    assert (unknown_parameters, long_key, not_a_boolean) == (True, False, False)
