"""Whatever a client writes in a text field reads back exactly as it sent it, through every
route that writes one; a NUL in one is refused with 422 naming the field, and writes nothing.

Pinned while the database layer moves from values written into SQL text to bound parameters
(issue 54): quotes (single, doubled, unbalanced), backslashes (before a quote, doubled,
trailing), dollar quoting, placeholders (``$1``, ``%s``, ``%(x)s``), comments, statement
separators, an escape-string literal, injected SQL, and Unicode (astral, emoji sequences,
combining marks, right-to-left, zero-width, noncharacters, controls) must reach PostgreSQL and
come back code point for code point: in the write's answer, from GET by id, from the list
filtered by external id and from the events feed (whose JSON PostgreSQL makes), and over
GraphQL from its queries. Writing the same values again is ``unchanged`` (no new version, no
event): what PostgreSQL holds compares equal to them.

The routes: REST POST, PATCH, PUT by external id and the batch (per operation and atomic) of
customers, deals and activities, a deal's new customers, a webhook endpoint's POST and PATCH;
GraphQL's create, update, upsert and batch mutations of the three records, and the webhook
endpoint's create and update. Values are generated within each field's documented rules: its
maximum length and its pattern come from the committed ``openapi.json``, so a text field added
there is generated here too. No record has a JSON field of the client's (custom fields or
metadata) whose keys would need the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from tests.db.values_support import (
    ASTRAL,
    CUSTOMERS,
    DEALS,
    EVERY_FRAGMENT,
    MOST_FIELDS,
    PLURALS,
    RAW_EXTERNAL_IDS,
    RAW_TEXTS,
    RAWS,
    RECORD,
    ROUND_TRIPS,
    WEBHOOK,
    WEBHOOK_ADDRESS,
    WEBHOOK_FIELDS,
    WEBHOOK_PATH,
    WEBHOOKS,
    Department,
    Record,
    answer,
    camel,
    external_id,
    fit,
    fitted,
    graphql_operation,
)
from tests.rest_api.records_support import API, RECORDS


def reads_back(
    department: Department, plural: str, written: dict[str, Any], sent: Mapping[str, Any]
) -> dict[str, Any]:
    """``written`` (a write's answer) holds ``sent`` exactly, and is what GET by id and the list
    by its external id (whose JSON PostgreSQL makes) return."""
    assert {name: written[name] for name in sent} == dict(sent)
    assert department.get(f"/{plural}/{written['id']}") == written
    assert department.listed(plural, written["external_id"]) == [written]
    return written


def events_carry(department: Department, *records: Mapping[str, Any]) -> None:
    """The events since the last look (whose JSON PostgreSQL makes) are one for each record
    written since, carrying it as GET returns it; none if nothing changed."""
    carried = [event["data"] for event in department.new_events()]
    assert sorted(carried, key=lambda data: data["id"]) == sorted(records, key=lambda r: r["id"])


# --- REST -------------------------------------------------------------------------------------


@PLURALS
@ROUND_TRIPS
@given(raws=RAWS, raw_id=RAW_EXTERNAL_IDS)
@example(raws=[EVERY_FRAGMENT] * MOST_FIELDS, raw_id="');DROP+TABLE+x;--'")
@example(raws=[ASTRAL] * MOST_FIELDS, raw_id="$$" * 200)
def test_each_text_field_reads_back_exactly_after_a_post(
    department: Department, plural: str, raws: list[str], raw_id: str
) -> None:
    sent = {**fitted(RECORD[plural].fields, raws), "external_id": external_id(raw_id)}

    response = department.client.post(
        f"{API}/{plural}", json={**department.required(plural), **sent}, headers=department.headers
    )

    events_carry(department, reads_back(department, plural, answer(response, 201), sent))


@PLURALS
@ROUND_TRIPS
@given(raws=RAWS, cleared=st.lists(st.booleans(), min_size=MOST_FIELDS, max_size=MOST_FIELDS))
@example(raws=[EVERY_FRAGMENT] * MOST_FIELDS, cleared=[False] * MOST_FIELDS)
def test_each_text_field_reads_back_exactly_after_a_patch(
    department: Department, plural: str, raws: list[str], cleared: list[bool]
) -> None:
    record = RECORD[plural]
    made = department.made(plural)
    department.new_events()
    # An optional field may be cleared (null) as well; a required one only changed.
    changes: dict[str, str | None] = {
        each.name: None if clear and not each.required else fit(each, raw)
        for each, raw, clear in zip(record.fields, raws, cleared, strict=False)
    }

    response = department.client.patch(
        f"{API}/{plural}/{made['id']}", json=changes, headers=department.headers
    )

    patched = reads_back(department, plural, answer(response, 200), changes)
    changed = any(made[name] != value for name, value in changes.items())
    events_carry(department, *([patched] if changed else []))


@PLURALS
@ROUND_TRIPS
@given(raws=RAWS, other_raws=RAWS, raw_id=RAW_EXTERNAL_IDS)
@example(raws=[EVERY_FRAGMENT] * MOST_FIELDS, other_raws=[ASTRAL] * MOST_FIELDS, raw_id="'$$'")
def test_each_text_field_reads_back_exactly_after_a_put_by_external_id_and_again_is_unchanged(
    department: Department, plural: str, raws: list[str], other_raws: list[str], raw_id: str
) -> None:
    record, api = RECORD[plural], RECORDS[plural]
    key = external_id(raw_id)
    first, then = fitted(record.fields, raws), fitted(record.fields, other_raws)

    def put(values: dict[str, str]) -> Any:
        return api.put(
            department.client, department.headers, key, {**department.required(plural), **values}
        )

    created = put(first)
    made = reads_back(department, plural, answer(created, 201), {**first, "external_id": key})
    events_carry(department, made)
    updated = put(then)
    changed = reads_back(department, plural, answer(updated, 200), {**then, "external_id": key})
    events_carry(department, *([changed] if then != first else []))
    again = put(then)

    assert answer(again, 200) == updated.json()
    assert again.headers["etag"] == updated.headers["etag"]
    events_carry(department)


@PLURALS
@ROUND_TRIPS
@given(
    raws=RAWS,
    other_raws=RAWS,
    raw_ids=st.tuples(RAW_EXTERNAL_IDS, RAW_EXTERNAL_IDS),
    atomic=st.booleans(),
)
@example(
    raws=[EVERY_FRAGMENT] * MOST_FIELDS,
    other_raws=[ASTRAL] * MOST_FIELDS,
    raw_ids=("'", "$1"),
    atomic=False,
)
# What an array's or a row's literal would take for a null, or leave out: each is a value.
@example(raws=["NULL"] * MOST_FIELDS, other_raws=[""] * MOST_FIELDS, raw_ids=("", ""), atomic=True)
def test_each_text_field_reads_back_exactly_after_a_batch_and_again_is_unchanged(
    department: Department,
    plural: str,
    raws: list[str],
    other_raws: list[str],
    raw_ids: tuple[str, str],
    atomic: bool,
) -> None:
    """An upsert and a create, then both upserted with each other's values, then again."""
    record, api = RECORD[plural], RECORDS[plural]
    required = department.required(plural)
    upserted, created = (external_id(raw) for raw in raw_ids)
    first, then = fitted(record.fields, raws), fitted(record.fields, other_raws)

    def batch(operations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        response = api.batch(department.client, department.headers, operations, atomic=atomic)
        results: list[dict[str, Any]] = answer(response, 200)["results"]
        return results

    made = batch(
        [
            {"op": "upsert", "external_id": upserted, "data": {**required, **first}},
            {"op": "create", "data": {**required, **then, "external_id": created}},
        ]
    )
    assert [r["outcome"] for r in made] == ["created", "created"]
    events_carry(
        department,
        reads_back(department, plural, made[0]["data"], {**first, "external_id": upserted}),
        reads_back(department, plural, made[1]["data"], {**then, "external_id": created}),
    )
    swapped = [
        {"op": "upsert", "external_id": upserted, "data": {**required, **then}},
        {"op": "upsert", "external_id": created, "data": {**required, **first}},
    ]
    updated = batch(swapped)
    outcome = "updated" if first != then else "unchanged"
    assert [r["outcome"] for r in updated] == [outcome, outcome]
    changed = [
        reads_back(department, plural, updated[0]["data"], then),
        reads_back(department, plural, updated[1]["data"], first),
    ]
    events_carry(department, *(changed if first != then else []))
    again = batch(swapped)

    assert [r["outcome"] for r in again] == ["unchanged", "unchanged"]
    assert [r["data"] for r in again] == [r["data"] for r in updated]
    events_carry(department)


@ROUND_TRIPS
@given(
    raws=RAWS,
    other_raws=RAWS,
    raw_ids=st.tuples(RAW_EXTERNAL_IDS, RAW_EXTERNAL_IDS, RAW_EXTERNAL_IDS),
)
@example(
    raws=[EVERY_FRAGMENT] * MOST_FIELDS,
    other_raws=[ASTRAL] * MOST_FIELDS,
    raw_ids=("'", "$$", "--"),
)
def test_each_text_field_of_a_deals_new_customers_reads_back_exactly(
    department: Department, raws: list[str], other_raws: list[str], raw_ids: tuple[str, str, str]
) -> None:
    deal_key, *customer_keys = (external_id(raw) for raw in raw_ids)
    customers = [
        {**fitted(CUSTOMERS.fields, values), "external_id": key}
        for values, key in zip((raws, other_raws), customer_keys, strict=True)
    ]
    sent = {**fitted(DEALS.fields, raws[::-1]), "external_id": deal_key}

    response = department.client.post(
        f"{API}/deals", json={**sent, "customers": customers}, headers=department.headers
    )

    deal = reads_back(department, "deals", answer(response, 201), sent)
    made = [
        reads_back(department, "customers", customer, given_)
        for customer, given_ in zip(deal["customers"], customers, strict=True)
    ]
    events_carry(department, deal, *made)


@ROUND_TRIPS
@given(raws=st.lists(RAW_TEXTS, min_size=4, max_size=4))
@example(raws=[EVERY_FRAGMENT, EVERY_FRAGMENT, ASTRAL, ASTRAL])
def test_a_webhook_endpoints_url_and_description_read_back_exactly_over_rest_and_graphql(
    department: Department, raws: list[str]
) -> None:
    (description,) = WEBHOOK_FIELDS
    values = [
        {"url": WEBHOOK_ADDRESS + fit(WEBHOOK_PATH, url), "description": fit(description, text)}
        for url, text in (raws[:2], raws[2:])
    ]
    body = {"events": ["*"], "enabled": False, **values[0]}

    made = answer(department.client.post(WEBHOOKS, json=body, headers=department.headers), 201)
    assert {name: made[name] for name in values[0]} == values[0]
    patched = department.client.patch(
        f"{WEBHOOKS}/{made['id']}", json=values[1], headers=department.headers
    )
    assert {name: answer(patched, 200)[name] for name in values[1]} == values[1]
    assert department.get(f"/webhooks/{made['id']}") == patched.json()

    issued = department.graphql_data(
        f"mutation ($input: WebhookEndpointInput!) {{"
        f" createWebhookEndpoint(input: $input) {{ endpoint {{ {WEBHOOK} }} }} }}",
        {"input": body},
    )["createWebhookEndpoint"]["endpoint"]
    assert {name: issued[name] for name in values[0]} == values[0]
    rest = department.get(f"/webhooks/{issued['id']}")
    assert {name: rest[name] for name in values[0]} == values[0]
    updated = department.graphql_data(
        f"mutation ($id: UUID!, $changes: WebhookEndpointChanges!) {{"
        f" updateWebhookEndpoint(id: $id, changes: $changes) {{ {WEBHOOK} }} }}",
        {"id": issued["id"], "changes": values[1]},
    )["updateWebhookEndpoint"]
    assert {name: updated[name] for name in values[1]} == values[1]
    read = department.graphql_data(
        f"query ($id: UUID!) {{ webhookEndpoint(id: $id) {{ {WEBHOOK} }} }}", {"id": issued["id"]}
    )["webhookEndpoint"]
    assert read == updated


# --- GraphQL ----------------------------------------------------------------------------------


def in_graphql(values: Mapping[str, str | None]) -> dict[str, str | None]:
    return {camel(name): value for name, value in values.items()}


def graphql_reads_back(
    department: Department,
    record: Record,
    written: Mapping[str, Any],
    sent: Mapping[str, Any],
) -> dict[str, Any]:
    """``written`` (a mutation's answer) holds ``sent`` exactly, and is what the record's query
    and its list by external id answer; REST's GET (which it returns) reads the same text."""
    assert {name: written[name] for name in sent} == dict(sent)
    read = department.graphql_data(
        f"query ($id: UUID!, $externalId: String!) {{"
        f" {record.one}(id: $id) {{ {record.selection} }}"
        f" {record.plural}(filter: {{externalId: $externalId}}) {{ edges {{ node {{"
        f" {record.selection} }} }} }} }}",
        {"id": written["id"], "externalId": written["externalId"]},
    )
    assert read[record.one] == written
    assert [edge["node"] for edge in read[record.plural]["edges"]] == [written]
    rest: dict[str, Any] = department.get(f"/{record.plural}/{written['id']}")
    assert {each.camel: rest[each.name] for each in record.fields} == {
        each.camel: written[each.camel] for each in record.fields
    }
    return rest


@PLURALS
@ROUND_TRIPS
@given(raws=RAWS, other_raws=RAWS, raw_ids=st.tuples(RAW_EXTERNAL_IDS, RAW_EXTERNAL_IDS))
@example(
    raws=[EVERY_FRAGMENT] * MOST_FIELDS, other_raws=[ASTRAL] * MOST_FIELDS, raw_ids=("'", ";--")
)
def test_each_text_field_reads_back_exactly_after_each_graphql_mutation(
    department: Department,
    plural: str,
    raws: list[str],
    other_raws: list[str],
    raw_ids: tuple[str, str],
) -> None:
    """create, update, upsert (to the first values again), then a batch's create and upsert."""
    record, name = RECORD[plural], RECORD[plural].name
    required = department.graphql_required(plural)
    key, batched = (external_id(raw) for raw in raw_ids)
    first = in_graphql(fitted(record.fields, raws))
    then = in_graphql(fitted(record.fields, other_raws))
    created_input: dict[str, Any] = {**required, **first, "externalId": key}
    customers = [
        {**in_graphql(fitted(CUSTOMERS.fields, other_raws)), "externalId": external_id("")}
    ]
    if record is DEALS:
        created_input["customers"] = customers

    created = department.graphql_data(
        f"mutation ($input: {name}Input!) {{ create{name}(input: $input) {{"
        f" {record.selection} }} }}",
        {"input": created_input},
    )[f"create{name}"]
    events_carry(
        department,
        graphql_reads_back(department, record, created, {**first, "externalId": key}),
        *[
            graphql_reads_back(department, CUSTOMERS, customer, given_)
            for customer, given_ in zip(created.get("customers", []), customers, strict=False)
        ],
    )
    updated = department.graphql_data(
        f"mutation ($id: UUID!, $changes: {name}Changes!) {{"
        f" update{name}(id: $id, changes: $changes) {{ {record.selection} }} }}",
        {"id": created["id"], "changes": then},
    )[f"update{name}"]
    changed = graphql_reads_back(department, record, updated, then)
    events_carry(department, *([changed] if then != first else []))
    upserted = department.graphql_data(
        f"mutation ($externalId: String!, $input: {record.upsert_input}!) {{"
        f" upsert{name}(externalId: $externalId, input: $input) {{"
        f" outcome {record.one} {{ {record.selection} }} }} }}",
        {"externalId": key, "input": {**required, **first}},
    )[f"upsert{name}"]
    assert upserted["outcome"] == ("UPDATED" if then != first else "UNCHANGED")
    changed = graphql_reads_back(department, record, upserted[record.one], first)
    events_carry(department, *([changed] if then != first else []))
    operations = [
        graphql_operation(record, "CREATE", {**required, **then}, batched),
        graphql_operation(record, "UPSERT", {**required, **first}, key),
    ]
    batch = department.graphql_data(
        f"mutation ($operations: [{name}OperationInput!]!) {{"
        f" batch{plural.capitalize()}(operations: $operations) {{"
        f" results {{ outcome {record.one} {{ {record.selection} }} }} }} }}",
        {"operations": operations},
    )[f"batch{plural.capitalize()}"]["results"]

    assert [result["outcome"] for result in batch] == ["CREATED", "UNCHANGED"]
    made = graphql_reads_back(
        department, record, batch[0][record.one], {**then, "externalId": batched}
    )
    graphql_reads_back(department, record, batch[1][record.one], first)
    events_carry(department, made)
