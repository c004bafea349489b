"""What the values round trips (``test_values_round_trip.py``) and refusals
(``test_values_refused.py``) share: each text field's documented rules, read from the committed
``openapi.json``; the values generated within them; the records and routes the tests write; and
a department of the module's tenant that a test writes in and reads back from.
"""

from __future__ import annotations

import itertools
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import settings
from hypothesis import strategies as st

from tests.depth import DEPTH, SHARED_FIXTURES
from tests.graphql_api.support import gql
from tests.rest_api.records_support import API, RECORDS

# --- each text field's documented rules -------------------------------------------------------

DOCUMENT = Path(__file__).parents[2] / "openapi.json"
SCHEMAS: dict[str, Any] = json.loads(DOCUMENT.read_text())["components"]["schemas"]


def camel(name: str) -> str:
    """A field's GraphQL name."""
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class TextField:
    """A text field as the OpenAPI document states it: its maximum length (in characters), its
    pattern (read as ECMA-262 reads it: ``$`` only at the very end) and whether it is required
    (then it may be changed, never cleared)."""

    name: str
    max_length: int
    pattern: re.Pattern[str]
    required: bool

    @property
    def camel(self) -> str:
        return camel(self.name)


def _as_ecma_reads_it(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.removesuffix("$") + r"\Z" if pattern.endswith("$") else pattern)


def text_fields(schema: str, *, leaving_out: Sequence[str] = ("external_id",)) -> list[TextField]:
    """The text fields of a request schema (its ids, dates and choices have no length)."""
    required = SCHEMAS[schema].get("required", [])
    found = []
    for name, value in SCHEMAS[schema]["properties"].items():
        for kind in value.get("anyOf", [value]):
            if kind.get("type") == "string" and "maxLength" in kind and name not in leaving_out:
                pattern = _as_ecma_reads_it(kind.get("pattern", ""))
                found.append(TextField(name, kind["maxLength"], pattern, name in required))
    return found


(EXTERNAL_ID,) = [
    f for f in text_fields("CustomerFields", leaving_out=()) if f.name == "external_id"
]

# --- the values -------------------------------------------------------------------------------

FRAGMENTS = (
    "'", "''", "'''", '"', '""', "`", "\\", "\\\\", "\\'", "\\\"", "\\n", "\\x41", "\\u0041",
    "\\0", "\\N", "$$", "$tag$", "$1", "$2::text", "?", ":name", "%s", "%%", "%(x)s", "%b",
    "{}", "{0}", "--", "-- ", "/*", "*/", "/* */", ";", "'); DROP TABLE x; --", "E'\\x41'",
    "U&'\\0041'", "' OR '1'='1", "NULL", "null", "{\"a\",NULL}", ",", "(", ")",
    "\U0001f600", "\U0001f469\u200d\U0001f4bb", "\U0001f1e9\U0001f1ea", "\U00010348",
    "\U0001d518", "\U0010ffff", "\uffff", "\ufffd", "e\u0301", "\u0301\u0302",
    "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd", "\u202e", "\u200f",
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00a0", "\u2028", "\t", "\n", "\r\n",
    "\r", "\x7f", "\x01", "\x1b[31m", "\u00df", "\u0130", "\ufb01", "\u2126", "\u03a9",
    "\u00e4", "a\u0308",
)  # fmt: skip
ANY_CHARACTER = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")


# The longest text any request schema documents (a note's).
LONGEST = max(
    each.max_length
    for schema in SCHEMAS
    if "properties" in SCHEMAS[schema]
    for each in text_fields(schema, leaving_out=())
)


def _joined(pieces: list[str], to_the_limit: bool) -> str:
    """The pieces joined; to the limit, repeated to the length of the longest text (which
    ``fit`` cuts to the field's)."""
    text = "".join(pieces)
    return text * (LONGEST // len(text) + 1) if to_the_limit and text else text


# Fragments among random text; now and then as long as a field takes.
RAW_TEXTS = st.builds(
    _joined,
    st.lists(st.sampled_from(FRAGMENTS) | st.text(ANY_CHARACTER, max_size=10), max_size=10),
    st.sampled_from((False, False, False, True)),
)
# Every fragment, then a trailing backslash; and as many astral characters as a field takes.
EVERY_FRAGMENT = "".join(FRAGMENTS) + "\\"
ASTRAL = "\U0001f600" * LONGEST

EXTERNAL_ID_CHARACTERS = string.ascii_letters + string.digits + "._~:@!$&'()*+,;=-"
EXTERNAL_ID_FRAGMENTS = ("'", "''", "$$", "$1", "--", ";", "'--", "');DROP+TABLE+x;--", "'or'1'='1")
RAW_EXTERNAL_IDS = st.builds(
    _joined,
    st.lists(
        st.sampled_from(EXTERNAL_ID_FRAGMENTS)
        | st.text(st.sampled_from(EXTERNAL_ID_CHARACTERS), max_size=8),
        max_size=8,
    ),
    st.sampled_from((False, False, False, True)),
)
_SERIAL = itertools.count()


def external_id(raw: str) -> str:
    """``raw`` as an external id of its own: a serial number first (unique in this process),
    then as much of ``raw`` as the documented length takes."""
    made = f"{next(_SERIAL)}~{raw}"[: EXTERNAL_ID.max_length]
    assert EXTERNAL_ID.pattern.search(made), made
    return made


def _not_white(character: str) -> bool:
    # Wider than the document's white space (Python's adds U+001C to U+001F and U+0085).
    return not character.isspace() and character != "\ufeff"


def fit(text_field: TextField, raw: str) -> str:
    """``raw`` made a valid value of the field: as much of it as its length takes, shaped as an
    address for an email, as an external id of the characters it may hold, with a quote first
    if it is blank and the field must not be."""
    value = raw[: text_field.max_length]
    if text_field is EXTERNAL_ID:
        value = ("x" + "".join(c for c in raw if c in EXTERNAL_ID_CHARACTERS))[
            : EXTERNAL_ID.max_length
        ]
    if text_field.name == "email":
        kept = "".join(c for c in raw if c != "@" and _not_white(c))[: text_field.max_length - 1]
        kept = kept.ljust(2, "x")
        value = f"{kept[: len(kept) // 2]}@{kept[len(kept) // 2 :]}"
    if not text_field.pattern.search(value):
        value = ("'" + value)[: text_field.max_length]
    assert text_field.pattern.search(value), (text_field.name, value)
    return value


def fitted(fields: Sequence[TextField], raws: Sequence[str]) -> dict[str, str]:
    return {each.name: fit(each, raw) for each, raw in zip(fields, raws, strict=False)}


def with_a_nul(text_field: TextField, raw: str, at: int) -> str:
    """A valid value of the field, a NUL put into it at ``at`` (modulo its length + 1)."""
    value = fit(text_field, raw)[: text_field.max_length - 1]
    where = at % (len(value) + 1)
    return value[:where] + "\x00" + value[where:]


# --- the records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A record as this module writes it: its REST path, its text fields (but its external
    id) and its GraphQL names (createCustomer, CustomerInput, CustomerChanges, customer)."""

    plural: str
    schema: str
    name: str
    upsert_input: str

    @property
    def fields(self) -> list[TextField]:
        return text_fields(self.schema)

    @property
    def one(self) -> str:
        return self.name[0].lower() + self.name[1:]

    @property
    def selection(self) -> str:
        """Its GraphQL fields this module reads: its id and its text fields (a deal's with its
        customers')."""
        own = " ".join(["id", "externalId", *(each.camel for each in self.fields)])
        return f"{own} customers {{ {CUSTOMERS.selection} }}" if self is DEALS else own


CUSTOMERS = Record("customers", "CustomerFields", "Customer", "CustomerInput")
DEALS = Record("deals", "DealCreate", "Deal", "DealUpsertInput")
ACTIVITIES = Record("activities", "ActivityFields", "Activity", "ActivityInput")
RECORD = {record.plural: record for record in (CUSTOMERS, DEALS, ACTIVITIES)}
MOST_FIELDS = max(len(record.fields) for record in RECORD.values())
# Raw texts for each text field of any record.
RAWS = st.lists(RAW_TEXTS, min_size=MOST_FIELDS, max_size=MOST_FIELDS)

WEBHOOKS = f"{API}/webhooks"
WEBHOOK_FIELDS = text_fields("WebhookEndpointFields", leaving_out=("url",))
# A public address written as an IP, so that no name is looked up; the path is the client's.
WEBHOOK_ADDRESS = "https://8.8.8.8/"
(_URL,) = [f for f in text_fields("WebhookEndpointFields", leaving_out=()) if f.name == "url"]
WEBHOOK_PATH = TextField("url", _URL.max_length - len(WEBHOOK_ADDRESS), _URL.pattern, True)
WEBHOOK = "id url description"

# Each example of a round trip sends a dozen requests or more, and a generated value fills a
# field to its limit now and then: a tenth of the profile's examples (10 in CI), and as many
# for a refusal (a request or two) on each of its thirty routes.
ROUND_TRIPS = settings(SHARED_FIXTURES, max_examples=max(3, DEPTH.examples // 10))
REFUSALS = settings(SHARED_FIXTURES, max_examples=max(3, DEPTH.examples // 10))


@dataclass
class Department:
    """A department of the module's tenant made for one test, through its key: what the test
    writes it reads back, and its events feed is the test's own."""

    client: TestClient
    headers: dict[str, str]
    _required: dict[str, dict[str, Any]] = field(default_factory=dict)
    _targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    _after: str | None = None

    def required(self, plural: str) -> dict[str, Any]:
        """The rest of a valid REST body of a record (an activity's customer), made once (its
        events left unread)."""
        if plural not in self._required:
            self._required[plural] = RECORDS[plural].required(self.client, self.headers)
            self.new_events()
        return self._required[plural]

    def made(self, plural: str) -> dict[str, Any]:
        """A new record with a new external id (its POST's answer)."""
        body = RECORDS[plural].body(self.required(plural), "Made", external_id=external_id(""))
        response = self.client.post(f"{API}/{plural}", json=body, headers=self.headers)
        made: dict[str, Any] = answer(response, 201)
        return made

    def target(self, plural: str) -> dict[str, Any]:
        """A record of the test's that its writes change (its POST's answer), made once."""
        if plural not in self._targets:
            self._targets[plural] = self.made(plural)
        return self._targets[plural]

    def graphql_required(self, plural: str) -> dict[str, Any]:
        return {
            camel(name): value.upper() if name == "type" else value
            for name, value in self.required(plural).items()
        }

    def get(self, path: str, **params: Any) -> Any:
        return answer(self.client.get(f"{API}{path}", params=params, headers=self.headers), 200)

    def listed(self, plural: str, external_id: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get(f"/{plural}", external_id=external_id)["data"]
        return found

    def new_events(self) -> list[dict[str, Any]]:
        """The department's events since the last call."""
        events: list[dict[str, Any]] = []
        while True:
            after = {} if self._after is None else {"after": self._after}
            page = self.get("/events", limit=100, **after)
            events += page["data"]
            self._after = page["next_cursor"]
            if len(page["data"]) < 100:
                return events

    def graphql(self, document: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        return gql(self.client, document, variables, self.headers)

    def graphql_data(self, document: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        body = self.graphql(document, variables)
        assert "errors" not in body, body["errors"]
        data: dict[str, Any] = body["data"]
        return data


def answer(response: Any, status: int) -> Any:
    assert response.status_code == status, response.text
    return response.json()


PLURALS = pytest.mark.parametrize("plural", sorted(RECORD))


def graphql_operation(record: Record, op: str, data: dict[str, Any], key: str) -> dict[str, Any]:
    """An operation of a batch mutation: a deal gives its fields in the field its op names."""
    if op == "CREATE":
        given = {**data, "externalId": key}
        return {"op": op, "create": given} if record is DEALS else {"op": op, "data": given}
    if record is DEALS:
        return {"op": op, "externalId": key, "upsert": data}
    return {"op": op, "externalId": key, "data": data}
