"""A NUL in a text field is refused with 422 naming the field, and writes nothing: through
every route that writes one (REST POST, PATCH, PUT by external id and the batch, per operation
and atomic, of customers, deals and activities, a deal's new customers, a webhook endpoint's
POST and PATCH; GraphQL's create, update, upsert and batch mutations of the three records).
The values it is put into are generated within each field's documented rules
(``values_support.py``), as the round trips' are (``test_values_round_trip.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.db.values_support import (
    CUSTOMERS,
    DEALS,
    EXTERNAL_ID,
    PLURALS,
    RAW_TEXTS,
    RECORD,
    REFUSALS,
    WEBHOOK_ADDRESS,
    WEBHOOK_FIELDS,
    WEBHOOK_PATH,
    WEBHOOKS,
    Department,
    TextField,
    answer,
    external_id,
    graphql_operation,
    with_a_nul,
)
from tests.rest_api.records_support import API, RECORDS


def code_for(text_field: TextField) -> str:
    """An external id's rule is its pattern, which a NUL breaks; any other text refuses it."""
    return "invalid_format" if text_field is EXTERNAL_ID else "invalid_character"


def refused(response: Any, *named: tuple[str, str]) -> None:
    """A REST answer 422 validation_failed, naming exactly these fields with these codes."""
    problem = answer(response, 422)
    assert problem["code"] == "validation_failed", problem
    assert [(error["field"], error["code"]) for error in problem["errors"]] == list(named)


def graphql_refused(body: Mapping[str, Any], *named: tuple[str, str]) -> None:
    assert body["data"] is None, body
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "validation_failed", error
    assert [(e["field"], e["code"]) for e in error["extensions"]["errors"]] == list(named)


def _rest_post(department: Department, plural: str, text_field: TextField, value: str) -> None:
    key = external_id("")
    body = RECORDS[plural].body(department.required(plural), "Made", external_id=key)

    response = department.client.post(
        f"{API}/{plural}", json={**body, text_field.name: value}, headers=department.headers
    )

    refused(response, (text_field.name, code_for(text_field)))
    assert department.listed(plural, key) == []


def _rest_patch(department: Department, plural: str, text_field: TextField, value: str) -> None:
    target = department.target(plural)

    response = department.client.patch(
        f"{API}/{plural}/{target['id']}", json={text_field.name: value}, headers=department.headers
    )

    refused(response, (text_field.name, code_for(text_field)))
    assert department.get(f"/{plural}/{target['id']}") == target


def _rest_put(department: Department, plural: str, text_field: TextField, value: str) -> None:
    """To the target, or with the NUL in the path's external id (percent-encoded)."""
    target, body = department.target(plural), RECORDS[plural].body(department.required(plural), "B")
    if text_field is EXTERNAL_ID:
        path = value.replace("\x00", "%00")  # as a client percent-encodes it
    else:
        path, body = target["external_id"], {**body, text_field.name: value}

    response = RECORDS[plural].put(department.client, department.headers, path, body)

    refused(response, (text_field.name, code_for(text_field)))
    assert department.get(f"/{plural}/{target['id']}") == target


def _rest_batch(
    department: Department, plural: str, text_field: TextField, value: str, *, atomic: bool
) -> None:
    api = RECORDS[plural]
    kept, bad = external_id(""), external_id("")
    operations = [
        {"op": "upsert", "external_id": kept, "data": api.body(department.required(plural), "A")},
        {
            "op": "upsert",
            "external_id": bad,
            "data": api.body(department.required(plural), "B", **{text_field.name: value}),
        },
    ]

    response = api.batch(department.client, department.headers, operations, atomic=atomic)

    named = [(f"operations[1].data.{text_field.name}", code_for(text_field))]
    if atomic:
        problem = answer(response, 422)
        assert problem["code"] == "batch_rejected"
        assert [
            (f["index"], [(e["field"], e["code"]) for e in f["error"]["errors"]])
            for f in problem["failures"]
        ] == [(1, named)]
        assert department.listed(plural, kept) == []
    else:
        (written, failed) = answer(response, 200)["results"]
        assert written["outcome"] == "created"
        assert (failed["outcome"], failed["status"], failed.get("data")) == ("failed", 422, None)
        assert [(e["field"], e["code"]) for e in failed["error"]["errors"]] == named
        assert department.listed(plural, kept) == [written["data"]]
        assert [event["data"] for event in department.new_events()] == [written["data"]]
    assert department.listed(plural, bad) == []


def _graphql_create(department: Department, plural: str, text_field: TextField, value: str) -> None:
    record, key = RECORD[plural], external_id("")
    given = {**department.graphql_required(plural), "externalId": key}
    given |= {each.camel: "Made" for each in record.fields if each.required}

    body = department.graphql(
        f"mutation ($input: {record.name}Input!) {{ create{record.name}(input: $input) {{ id }} }}",
        {"input": {**given, text_field.camel: value}},
    )

    graphql_refused(body, (text_field.camel, code_for(text_field)))
    assert department.listed(plural, key) == []


def _graphql_update(department: Department, plural: str, text_field: TextField, value: str) -> None:
    record, target = RECORD[plural], department.target(plural)

    body = department.graphql(
        f"mutation ($id: UUID!, $changes: {record.name}Changes!) {{"
        f" update{record.name}(id: $id, changes: $changes) {{ id }} }}",
        {"id": target["id"], "changes": {text_field.camel: value}},
    )

    graphql_refused(body, (text_field.camel, code_for(text_field)))
    assert department.get(f"/{plural}/{target['id']}") == target


def _graphql_upsert(department: Department, plural: str, text_field: TextField, value: str) -> None:
    record, target = RECORD[plural], department.target(plural)
    given = department.graphql_required(plural)
    given |= {each.camel: "Changed" for each in record.fields if each.required}

    body = department.graphql(
        f"mutation ($externalId: String!, $input: {record.upsert_input}!) {{"
        f" upsert{record.name}(externalId: $externalId, input: $input) {{ outcome }} }}",
        {"externalId": target["external_id"], "input": {**given, text_field.camel: value}},
    )

    graphql_refused(body, (text_field.camel, code_for(text_field)))
    assert department.get(f"/{plural}/{target['id']}") == target


def _graphql_batch(department: Department, plural: str, text_field: TextField, value: str) -> None:
    record, kept, bad = RECORD[plural], external_id(""), external_id("")
    given = department.graphql_required(plural)
    given |= {each.camel: "Made" for each in record.fields if each.required}
    operations = [
        graphql_operation(record, "UPSERT", given, kept),
        graphql_operation(record, "UPSERT", {**given, text_field.camel: value}, bad),
    ]

    (written, failed) = department.graphql_data(
        f"mutation ($operations: [{record.name}OperationInput!]!) {{"
        f" batch{plural.capitalize()}(operations: $operations) {{ results {{"
        f" outcome {record.one} {{ id }} error {{ code errors {{ field code }} }} }} }} }}",
        {"operations": operations},
    )[f"batch{plural.capitalize()}"]["results"]

    assert written["outcome"] == "CREATED"
    assert (failed["outcome"], failed[record.one], failed["error"]["code"]) == (
        "FAILED",
        None,
        "validation_failed",
    )
    data = "upsert" if record is DEALS else "data"
    assert [(e["field"], e["code"]) for e in failed["error"]["errors"]] == [
        (f"operations[1].{data}.{text_field.camel}", code_for(text_field))
    ]
    assert [item["id"] for item in department.listed(plural, kept)] == [written[record.one]["id"]]
    assert department.listed(plural, bad) == []
    assert len(department.new_events()) == 1


Refusal = Callable[[Department, str, TextField, str], None]
# Each route, and whether a NUL in the record's external id is among its cases (where the body
# carries one that is not the path's or the operation's).
RECORD_REFUSALS: dict[str, tuple[Refusal, bool]] = {
    "POST": (_rest_post, True),
    "PATCH": (_rest_patch, True),
    "PUT by external id": (_rest_put, True),
    "batch": (lambda d, p, f, v: _rest_batch(d, p, f, v, atomic=False), False),
    "atomic batch": (lambda d, p, f, v: _rest_batch(d, p, f, v, atomic=True), False),
    "GraphQL create": (_graphql_create, True),
    "GraphQL update": (_graphql_update, True),
    "GraphQL upsert": (_graphql_upsert, False),
    "GraphQL batch": (_graphql_batch, False),
}


@pytest.mark.parametrize("route", list(RECORD_REFUSALS))
@PLURALS
@REFUSALS
@given(data=st.data(), raw=RAW_TEXTS, at=st.integers(min_value=0))
def test_a_nul_in_a_records_text_field_is_refused_naming_it_and_writes_nothing(
    department: Department, route: str, plural: str, data: st.DataObject, raw: str, at: int
) -> None:
    refusal, with_external_id = RECORD_REFUSALS[route]
    fields = RECORD[plural].fields + ([EXTERNAL_ID] if with_external_id else [])
    text_field = data.draw(st.sampled_from(fields), label="field")
    department.target(plural)
    department.new_events()

    refusal(department, plural, text_field, with_a_nul(text_field, raw, at))

    assert department.new_events() == []


@REFUSALS
@given(data=st.data(), raw=RAW_TEXTS, at=st.integers(min_value=0))
def test_a_nul_in_a_text_field_of_a_deals_new_customer_is_refused_and_writes_nothing(
    department: Department, data: st.DataObject, raw: str, at: int
) -> None:
    text_field = data.draw(st.sampled_from([*CUSTOMERS.fields, EXTERNAL_ID]), label="field")
    deal_key, customer_key = external_id(""), external_id("")
    customers = [
        {"last_name": "Kept", "external_id": customer_key},
        {"last_name": "Refused", text_field.name: with_a_nul(text_field, raw, at)},
    ]

    response = department.client.post(
        f"{API}/deals",
        json={"name": "Deal", "external_id": deal_key, "customers": customers},
        headers=department.headers,
    )

    refused(response, (f"customers[1].{text_field.name}", code_for(text_field)))
    assert department.listed("deals", deal_key) == []
    assert department.listed("customers", customer_key) == []
    assert department.new_events() == []


@pytest.mark.parametrize("method", ["POST", "PATCH"])
@REFUSALS
@given(data=st.data(), raw=RAW_TEXTS, at=st.integers(min_value=0))
def test_a_nul_in_a_webhook_endpoints_text_is_refused_naming_it_and_writes_nothing(
    department: Department, method: str, data: st.DataObject, raw: str, at: int
) -> None:
    text_field = data.draw(st.sampled_from([*WEBHOOK_FIELDS, WEBHOOK_PATH]), label="field")
    value = with_a_nul(text_field, raw, at)
    if text_field is WEBHOOK_PATH:
        value = WEBHOOK_ADDRESS + value
    body = {"url": WEBHOOK_ADDRESS, "events": ["*"], "enabled": False}
    before = department.get("/webhooks", limit=100)

    if method == "POST":
        response = department.client.post(
            WEBHOOKS, json={**body, text_field.name: value}, headers=department.headers
        )
    else:
        made = answer(department.client.post(WEBHOOKS, json=body, headers=department.headers), 201)
        before = department.get("/webhooks", limit=100)
        response = department.client.patch(
            f"{WEBHOOKS}/{made['id']}", json={text_field.name: value}, headers=department.headers
        )

    refused(response, (text_field.name, "invalid_character"))
    assert department.get("/webhooks", limit=100) == before
