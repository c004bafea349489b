"""Any value of each custom field type comes back as it went in, through every route that
writes a record (create, PATCH, upsert, batch) and every one that shows it (the answer, a read,
the list, the event): generated values, one tenant with a field of every type."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from dealbase.db.database import Database
from dealbase.platform.shapes import format_timestamp
from tests.depth import DEPTH, SHARED_FIXTURES
from tests.rest_api.test_custom_fields import define, tenant_wide
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"
EVENTS = "/api/v1/integration/events"
TYPES = ("text", "email", "url", "integer", "decimal", "boolean", "date", "timestamp")
OPTIONS = [{"label": "Gold"}, {"label": "Silver"}, {"label": "Bronze"}]


@pytest.fixture(scope="module")
def options(client: TestClient, database: Database, shared: TenantWorld) -> dict[str, list[str]]:
    """A field of every type on the shared tenant's customers, and the selects' option ids."""
    headers = tenant_wide(database, shared)
    for kind in TYPES:
        define(client, headers, name=f"a_{kind}", label=kind, type=kind)
    return {
        kind: [
            option["id"]
            for option in define(
                client, headers, name=f"a_{kind}", label=kind, type=kind, options=OPTIONS
            )["options"]
        ]
        for kind in ("single_select", "multi_select")
    }


_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
_MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


def _values(options: dict[str, list[str]]) -> st.SearchStrategy[dict[str, Any]]:
    """Values of any of the fields, as a client sends them."""
    single, multi = options["single_select"], options["multi_select"]
    return st.fixed_dictionaries(
        {},
        optional={
            "a_text": _TEXT,
            "a_email": st.from_regex(r"[a-z0-9]{1,12}@[a-z]{1,12}\.[a-z]{2,6}", fullmatch=True),
            "a_url": st.from_regex(r"https://[a-z]{1,20}\.example/[a-z0-9]{0,20}", fullmatch=True),
            "a_integer": st.integers(-(2**63) + 1, 2**63 - 1),
            "a_decimal": st.decimals(-(10**18), 10**18, places=4).map(str),
            "a_boolean": st.booleans(),
            "a_date": st.dates().map(str),
            "a_timestamp": _MOMENTS.map(lambda moment: moment.isoformat()),
            "a_single_select": st.sampled_from(single),
            "a_multi_select": st.lists(st.sampled_from(multi), unique=True, max_size=3),
        },
    )


def _shown(values: dict[str, Any]) -> dict[str, Any]:
    """The values as a record shows them: moments in UTC with six digits and Z."""
    shown = dict(values)
    if "a_timestamp" in shown:
        shown["a_timestamp"] = format_timestamp(datetime.fromisoformat(shown["a_timestamp"]))
    if "a_decimal" in shown:
        shown["a_decimal"] = str(Decimal(shown["a_decimal"]))
    return shown


@settings(SHARED_FIXTURES, max_examples=max(5, DEPTH.examples // 5))
@given(data=st.data())
def test_any_custom_values_come_back_as_they_went_in_through_every_route(
    client: TestClient, shared: TenantWorld, options: dict[str, list[str]], data: st.DataObject
) -> None:
    headers = shared.key.headers
    first = data.draw(_values(options), "created")
    second = data.draw(_values(options), "changed")
    third = data.draw(_values(options), "upserted")
    everything = {f"a_{kind}": None for kind in (*TYPES, "single_select", "multi_select")}

    created = client.post(
        CUSTOMERS, json={"last_name": "A", "custom_fields": first}, headers=headers
    )
    assert created.status_code == 201, created.text
    record = created.json()
    assert record["custom_fields"] == {**everything, **_shown(first)}
    read = client.get(f"{CUSTOMERS}/{record['id']}", headers=headers).json()
    assert read == record

    changed = client.patch(
        f"{CUSTOMERS}/{record['id']}", json={"custom_fields": second}, headers=headers
    )
    assert changed.status_code == 200, changed.text
    expected = {**everything, **_shown(first), **_shown(second)}
    assert changed.json()["custom_fields"] == expected

    external_id = f"x-{record['id']}"
    upserted = client.put(
        f"{CUSTOMERS}/by-external-id/{external_id}",
        json={"last_name": "A", "custom_fields": third},
        headers=headers,
    )
    assert upserted.status_code == 201, upserted.text
    batch = client.post(
        f"{CUSTOMERS}/batch",
        json={
            "operations": [
                {
                    "op": "upsert",
                    "external_id": external_id,
                    "data": {"last_name": "A", "custom_fields": first},
                }
            ]
        },
        headers=headers,
    )
    assert batch.status_code == 200, batch.text
    (result,) = batch.json()["results"]
    assert result["data"]["custom_fields"] == {**everything, **_shown(third), **_shown(first)}
    listed = client.get(CUSTOMERS, params={"external_id": external_id}, headers=headers).json()[
        "data"
    ]
    assert listed == [result["data"]]
    updated = [
        event
        for event in _feed(client, headers)
        if event["type"] == "customer.updated" and event["data"]["id"] == record["id"]
    ]
    # A change that changes no value is no event.
    before = {**everything, **_shown(first)}
    assert [event["data"]["custom_fields"] for event in updated] == (
        [expected] if expected != before else []
    )


def _feed(client: TestClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    """Every event of the department, oldest first."""
    events: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        page = client.get(EVENTS, params=params, headers=headers).json()
        if not page["data"]:
            return events
        events += page["data"]
        params["after"] = page["next_cursor"]
