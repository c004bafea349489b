"""Bad input beyond what schemathesis generates: each case gets a clear 4xx and writes nothing.

Targets are the two documented creates (POST /customers, POST /deals), their PATCHes, and
POST /graphql. Every REST case must answer a 4xx ``application/problem+json`` whose ``code`` is
the one docs/api.md names, within a few seconds (never a 5xx, never a hang), and leave the
tenant's customers, deals, deal_customers, activities and idempotency records exactly as they
were: the row counts, and the rows themselves, are compared before and after.

GraphQL answers errors of an operation it ran inside a 200 (docs/graphql.md): there a refusal is
``data: null`` with ``extensions.code``; a request GraphQL cannot even read must be a 4xx problem.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Table, select

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.platform import tables
from tests.support import TenantWorld, build_tenant

INTEGRATION = "/api/v1/integration"
CUSTOMERS = f"{INTEGRATION}/customers"
DEALS = f"{INTEGRATION}/deals"
GRAPHQL = "/graphql"
PROBLEM = "application/problem+json"
MIB = 1024 * 1024
LONG_HEADER = 16 * 1024  # past the 8 KiB many servers and proxies allow
DEEP = 100_000  # levels of nesting
MANY = 10_000  # elements of an array
# An answer later than this is a hang: every case here is answered in milliseconds today.
ANSWER_WITHIN_SECONDS = 10.0

WATCHED: tuple[Table, ...] = (
    tables.customers,
    tables.deals,
    tables.deal_customers,
    tables.activities,
    tables.idempotency_records,
)

Headers = list[tuple[str, str]]
Snapshot = dict[str, list[tuple[Any, ...]]]


# --- Fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    # A 5xx must reach the assertions as a response, not as an exception in the test.
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def world(database: Database) -> TenantWorld:
    """One tenant for the module; each test compares its own before and after."""
    return build_tenant(database)


@pytest.fixture(scope="module")
def stranger(database: Database) -> TenantWorld:
    """Another tenant, whose valid key must not ride along with ours."""
    return build_tenant(database)


@dataclass(frozen=True)
class Rows:
    """Rows of the department for PATCH targets and for the link and activity tables."""

    customer_id: str
    deal_id: str


@pytest.fixture(scope="module")
def rows(client: TestClient, world: TenantWorld) -> Rows:
    headers = world.key.headers
    deal = client.post(
        DEALS, json={"name": "Engines", "customers": [{"last_name": "Lovelace"}]}, headers=headers
    )
    assert deal.status_code == 201, deal.text
    customer_id = deal.json()["customers"][0]["id"]
    activity = client.post(
        f"{INTEGRATION}/activities",
        json={"type": "call", "customer_id": customer_id, "deal_id": deal.json()["id"]},
        headers=headers,
    )
    assert activity.status_code == 201, activity.text
    return Rows(customer_id=customer_id, deal_id=deal.json()["id"])


def snapshot(database: Database, world: TenantWorld) -> Snapshot:
    with database.unit_of_work(world.tenant.scope) as uow:
        return {
            table.name: sorted(
                (tuple(row) for row in uow.connection.execute(select(table))), key=repr
            )
            for table in WATCHED
        }


def counts(state: Snapshot) -> dict[str, int]:
    return {name: len(table_rows) for name, table_rows in state.items()}


def changes(before: Snapshot, after: Snapshot) -> str:
    """What changed between two snapshots, in words; empty when nothing did."""
    said = []
    for name in before:
        if len(after[name]) != len(before[name]):
            said.append(f"{name} rows {len(before[name])} -> {len(after[name])}")
        elif after[name] != before[name]:
            said.append(f"{name} rows changed in place")
    return ", ".join(said)


class Watch:
    """The rows of our tenant (and of the stranger, whose key some cases smuggle in) when the
    test began, to judge a refusal by: nothing may change in either."""

    def __init__(self, database: Database, worlds: dict[str, TenantWorld]) -> None:
        self.database, self.worlds = database, worlds
        self.before = self._snapshot()

    def _snapshot(self) -> Snapshot:
        return {
            f"{label} {table}": table_rows
            for label, world in self.worlds.items()
            for table, table_rows in snapshot(self.database, world).items()
        }

    def written(self) -> str:
        return changes(self.before, self._snapshot())

    def refused(
        self,
        response: httpx.Response,
        status: int | None = None,
        code: str | None = None,
        errors: set[tuple[str, str]] | None = None,
    ) -> dict[str, Any]:
        """A clear 4xx problem (see ``assert_problem``), and no row written or changed."""
        written = self.written()
        try:
            body = assert_problem(response, status, code, errors)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\ndatabase: {written or 'unchanged'}") from None
        assert not written, f"refused, yet the database changed: {written}"
        return body

    def graphql_refused(self, response: httpx.Response, code: str) -> list[dict[str, Any]]:
        """An operation GraphQL ran and refused: 200, ``data: null``, the documented code, no
        INTERNAL error (the GraphQL form of a 5xx), and no row written or changed; the field
        errors of the refusal."""
        written = self.written()
        try:
            errors = graphql_refusal(response, code)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\ndatabase: {written or 'unchanged'}") from None
        assert not written, f"refused, yet the database changed: {written}"
        return errors


def graphql_refusal(response: httpx.Response, code: str) -> list[dict[str, Any]]:
    """200, ``data: null``, exactly the error ``code``, and no INTERNAL error."""
    assert response.status_code == 200, response.text[:500]
    body: dict[str, Any] = response.json()
    assert body.get("data") is None, body
    found = [error["extensions"]["code"] for error in body["errors"]]
    assert "INTERNAL" not in found, body["errors"]
    assert found == [code], body["errors"]
    errors: list[dict[str, Any]] = body["errors"][0]["extensions"].get("errors", [])
    return errors


@pytest.fixture
def watch(database: Database, world: TenantWorld, stranger: TenantWorld, rows: Rows) -> Watch:
    # After ``rows``: the module's own rows are not the test's writes.
    return Watch(database, {"our tenant's": world, "the stranger's": stranger})


def bounded(call: Callable[[], httpx.Response]) -> httpx.Response:
    """``call``'s response; a test failure, not a stuck suite, when it does not come back."""
    outcome: list[httpx.Response | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test thread below
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(ANSWER_WITHIN_SECONDS)
    if thread.is_alive():
        pytest.fail(f"no answer within {ANSWER_WITHIN_SECONDS} s: the request hangs")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def assert_problem(
    response: httpx.Response,
    status: int | None = None,
    code: str | None = None,
    errors: set[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """A clear 4xx: RFC 9457 problem+json, with the documented status, code and field errors."""
    assert response.status_code < 500, f"server error {response.status_code}: {response.text}"
    assert 400 <= response.status_code < 500, f"not refused: {response.status_code} {response.text}"
    if status is not None:
        assert response.status_code == status, response.text[:500]
    assert response.headers.get("content-type", "").startswith(PROBLEM), (
        response.headers.get("content-type"),
        response.text[:500],
    )
    body: dict[str, Any] = response.json()
    assert body["status"] == response.status_code
    assert body["type"] == f"/problems/{body['code']}"
    assert body["title"]
    assert body["detail"]
    assert body["request_id"]
    if code is not None:
        assert body["code"] == code, body
    if errors is not None:
        assert {(e["field"], e["code"]) for e in body["errors"]} == errors, body["errors"][:10]
    return body


# --- Targets and cases -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An operation taking a JSON body, and the required text field its bodies use."""

    name: str
    method: str
    path: str  # {customer} and {deal} are filled from the module's rows
    text_field: str

    def url(self, rows: Rows) -> str:
        return self.path.format(customer=rows.customer_id, deal=rows.deal_id)

    def body(self, **extra: object) -> dict[str, object]:
        return {self.text_field: "Lovelace", **extra}


POST_CUSTOMER = Target("POST customers", "POST", CUSTOMERS, "last_name")
POST_DEAL = Target("POST deals", "POST", DEALS, "name")
PATCH_CUSTOMER = Target("PATCH customer", "PATCH", f"{CUSTOMERS}/{{customer}}", "last_name")
PATCH_DEAL = Target("PATCH deal", "PATCH", f"{DEALS}/{{deal}}", "name")
TARGETS = (POST_CUSTOMER, POST_DEAL, PATCH_CUSTOMER, PATCH_DEAL)
CREATES = (POST_CUSTOMER, POST_DEAL)
DEAL_TARGETS = (POST_DEAL, PATCH_DEAL)


def chunks(total: int) -> Iterator[bytes]:
    """``total`` bytes of JSON white space streamed without a Content-Length, then an object."""
    sent = 0
    while sent < total:
        piece = min(64 * 1024, total - sent)
        sent += piece
        yield b" " * piece
    yield b"{}"


@dataclass(frozen=True)
class Case:
    """One bad request: its body and header changes, and the problem docs/api.md promises."""

    name: str
    status: int
    code: str
    errors: Callable[[Target], set[tuple[str, str]]] | None = None
    content: Callable[[Target], bytes | Iterator[bytes]] = lambda t: json.dumps(t.body()).encode()
    content_type: str | None = "application/json"
    headers: Callable[[Target], Headers] = lambda t: []
    targets: Sequence[Target] = TARGETS
    response_check: Callable[[httpx.Response], None] | None = None


def raw(text: str) -> Callable[[Target], bytes]:
    """A body of literal bytes, ``{f}`` standing for the target's required text field."""
    return lambda t: text.replace("{f}", t.text_field).encode("latin-1")


def padded_to(size: int) -> Callable[[Target], bytes]:
    """A JSON object of exactly ``size`` bytes whose only flaw is an unknown field."""

    def make(target: Target) -> bytes:
        head = f'{{"{target.text_field}": "Lovelace", "padding": "'.encode()
        return head + b"a" * (size - len(head) - 2) + b'"}'

    return make


def near_limit_deal(_: Target) -> bytes:
    """Just under 1 MiB: 100 customers with 10,000-character notes, the last one invalid."""
    customers: list[dict[str, object]] = [
        {"last_name": f"Customer {i}", "note": "n" * 10_000} for i in range(99)
    ]
    customers.append({"first_name": "No last name", "note": "n" * 10_000})
    body = json.dumps({"name": "Big", "customers": customers}).encode()
    assert 1_000_000 < len(body) < MIB
    return body


def field_error(name: str, code: str) -> Callable[[Target], set[tuple[str, str]]]:
    return lambda t: {(name.replace("{f}", t.text_field), code)}


def header(name: str, value: str) -> Callable[[Target], Headers]:
    return lambda t: [(name, value)]


def request_id_not_echoed(response: httpx.Response) -> None:
    echoed = response.headers["x-request-id"]
    assert len(echoed) <= 128, len(echoed)
    assert response.json()["request_id"] == echoed


def json_of(value: object) -> Callable[[Target], bytes]:
    return lambda t: json.dumps(value).encode()


def with_field(name: str, value: object) -> Callable[[Target], bytes]:
    return lambda t: json.dumps(t.body(**{name: value})).encode()


CASES: list[Case] = [
    # Size: 1 MiB is the limit, declared or streamed.
    Case("over 1 MiB, declared", 413, "payload_too_large", content=padded_to(MIB + 1)),
    Case("over 1 MiB, streamed", 413, "payload_too_large", content=lambda t: chunks(MIB + 1)),
    Case(
        "exactly 1 MiB",
        422,
        "validation_failed",
        errors=field_error("padding", "unknown_field"),
        content=padded_to(MIB),
    ),
    Case(
        "near 1 MiB, 100 customers, the last invalid",
        422,
        "validation_failed",
        errors=field_error("customers[99].last_name", "missing"),
        content=near_limit_deal,
        targets=(POST_DEAL,),
    ),
    # Nesting.
    Case("100,000 levels of [", 400, "malformed_json", content=lambda t: b"[" * DEEP),
    Case("100,000 levels of {", 400, "malformed_json", content=lambda t: b'{"a":' * DEEP),
    Case(
        "100,000 levels of [] closed",
        400,
        "malformed_json",
        content=lambda t: b"[" * DEEP + b"]" * DEEP,
    ),
    Case(
        "100,000 levels inside a field",
        400,
        "malformed_json",
        content=lambda t: f'{{"{t.text_field}": "x", "note": '.encode() + b"[" * DEEP,
    ),
    # NUL, invalid UTF-8, and other bytes that are not JSON text.
    Case("raw NUL in a string", 400, "malformed_json", content=raw('{"{f}": "a\x00b"}')),
    Case("raw NUL before the body", 400, "malformed_json", content=raw('\x00{"{f}": "a"}')),
    Case("invalid UTF-8 in a string", 400, "malformed_json", content=raw('{"{f}": "a\xff\xfeb"}')),
    Case("overlong UTF-8 NUL", 400, "malformed_json", content=raw('{"{f}": "a\xc0\x80b"}')),
    Case("lone surrogate escape", 400, "malformed_json", content=raw('{"{f}": "\\ud800"}')),
    Case(
        "UTF-16 body",
        400,
        "malformed_json",
        content=lambda t: json.dumps(t.body()).encode("utf-16"),
    ),
    Case("empty body", 400, "malformed_json", content=lambda t: b""),
    Case(
        "escaped U+0000 in a string",
        422,
        "validation_failed",
        errors=field_error("{f}", "invalid_character"),
        content=raw('{"{f}": "a\\u0000b"}'),
    ),
    Case(
        "escaped U+0000 in an optional field",
        422,
        "validation_failed",
        errors=field_error("note", "invalid_character"),
        content=raw('{"{f}": "a", "note": "\\u0000"}'),
    ),
    Case(
        "escaped U+0000 in a deal's customer",
        422,
        "validation_failed",
        errors=field_error("customers[1].last_name", "invalid_character"),
        content=raw('{"name": "d", "customers": [{"last_name": "a"}, {"last_name": "\\u0000"}]}'),
        targets=(POST_DEAL,),
    ),
    # Very long header values.
    Case(
        "16 KiB X-Api-Key",
        401,
        "unauthenticated",
        headers=header("X-Api-Key", "dbk_" + "k" * LONG_HEADER),
    ),
    Case(
        "16 KiB X-Department-Id",
        403,
        "forbidden",
        headers=header("X-Department-Id", "d" * LONG_HEADER),
    ),
    Case(
        "16 KiB Idempotency-Key",
        422,
        "validation_failed",
        errors=field_error("Idempotency-Key", "invalid_format"),
        headers=header("Idempotency-Key", "i" * LONG_HEADER),
        targets=CREATES,
    ),
    Case(
        "16 KiB If-Match",
        422,
        "validation_failed",
        errors=field_error("If-Match", "too_long"),
        headers=header("If-Match", '"1", ' * (LONG_HEADER // 5)),
        targets=(PATCH_CUSTOMER, PATCH_DEAL),
    ),
    Case(
        "16 KiB X-Request-Id",
        422,
        "validation_failed",
        errors=field_error("{f}", "blank"),
        content=lambda t: json.dumps({t.text_field: ""}).encode(),
        headers=header("X-Request-Id", "r" * LONG_HEADER),
        response_check=request_id_not_echoed,
    ),
    # Numbers as strings, floats for integers, and their kin.
    *[
        Case(
            f"volume {label}",
            422,
            "validation_failed",
            errors=field_error("volume", "wrong_type"),
            content=raw('{"{f}": "d", "volume": ' + literal + "}"),
            targets=DEAL_TARGETS,
        )
        for label, literal in [
            ('"100" (a number as a string)', '"100"'),
            ("1.5", "1.5"),
            ("1.0", "1.0"),
            ("1e2", "1e2"),
            ("true", "true"),
        ]
    ],
    Case(
        "volume 2**63",
        422,
        "validation_failed",
        errors=field_error("volume", "out_of_range"),
        content=raw('{"{f}": "d", "volume": ' + str(2**63) + "}"),
        targets=DEAL_TARGETS,
    ),
    Case(
        "volume of 5,000 digits",
        400,
        "malformed_json",
        content=raw('{"{f}": "d", "volume": ' + "9" * 5000 + "}"),
        targets=DEAL_TARGETS,
    ),
    Case(
        "a number for a string",
        422,
        "validation_failed",
        errors=field_error("{f}", "wrong_type"),
        content=raw('{"{f}": 100}'),
    ),
    Case(
        "a float for a string",
        422,
        "validation_failed",
        errors=field_error("{f}", "wrong_type"),
        content=raw('{"{f}": 1.5}'),
    ),
    Case(
        "birthday as a number",
        422,
        "validation_failed",
        errors=field_error("birthday", "invalid_date"),
        content=raw('{"{f}": "a", "birthday": 19851210}'),
        targets=(POST_CUSTOMER, PATCH_CUSTOMER),
    ),
    Case(
        "a deal customer's last_name as a number",
        422,
        "validation_failed",
        errors=field_error("customers[0].last_name", "wrong_type"),
        content=raw('{"name": "d", "customers": [{"last_name": 7}]}'),
        targets=(POST_DEAL,),
    ),
    # 10,000-element arrays.
    Case(
        "10,000 customers in a deal",
        422,
        "validation_failed",
        errors=field_error("customers", "too_many_items"),
        content=json_of({"name": "d", "customers": [{"last_name": "x"}] * MANY}),
        targets=(POST_DEAL,),
    ),
    Case(
        "10,000 invalid customers in a deal",
        422,
        "validation_failed",
        content=json_of({"name": "d", "customers": [{"first_name": "x"}] * MANY}),
        targets=(POST_DEAL,),
    ),
    Case(
        "a top-level array of 10,000 objects",
        422,
        "validation_failed",
        errors=field_error("", "wrong_type"),
        content=lambda t: json.dumps([t.body()] * MANY).encode(),
    ),
    Case(
        "a 10,000-element array for a string",
        422,
        "validation_failed",
        errors=field_error("note", "wrong_type"),
        content=with_field("note", ["x"] * MANY),
    ),
    Case(
        "JSON null",
        422,
        "validation_failed",
        errors=field_error("", "wrong_type"),
        content=lambda t: b"null",
    ),
    # Unknown fields.
    Case(
        "an unknown field",
        422,
        "validation_failed",
        errors=field_error("colour", "unknown_field"),
        content=with_field("colour", "red"),
    ),
    Case(
        "10,000 unknown fields",
        422,
        "validation_failed",
        content=lambda t: json.dumps(t.body(**{f"k{i}": 1 for i in range(MANY)})).encode(),
    ),
    Case(
        "an unknown field in a deal's customer",
        422,
        "validation_failed",
        errors=field_error("customers[0].colour", "unknown_field"),
        content=json_of({"name": "d", "customers": [{"last_name": "x", "colour": "red"}]}),
        targets=(POST_DEAL,),
    ),
    # Content types.
    *[
        Case(f"Content-Type {label}", 415, "unsupported_media_type", content_type=content_type)
        for label, content_type in [
            ("text/plain", "text/plain"),
            ("form", "application/x-www-form-urlencoded"),
            ("multipart", "multipart/form-data; boundary=x"),
            ("xml", "application/xml"),
            ("json with charset latin-1", "application/json; charset=latin-1"),
            ("jsonx", "application/jsonx"),
            ("missing", None),
        ]
    ],
]


def case_params() -> list[Any]:
    return [
        pytest.param(case, target, id=f"{target.name}: {case.name}")
        for case in CASES
        for target in case.targets
    ]


def send(
    client: TestClient,
    world: TenantWorld,
    method: str,
    url: str,
    content: bytes | Iterator[bytes] | None,
    content_type: str | None,
    replace: Sequence[tuple[str, str]] = (),
    add: Sequence[tuple[str, str]] = (),
) -> httpx.Response:
    """Raw headers, as a list: the key's two, ``replace`` in their place, then ``add``."""
    replaced = {name.lower() for name, _ in replace}
    headers: Headers = [
        (name, value) for name, value in world.key.headers.items() if name.lower() not in replaced
    ]
    headers += [*replace, *add]
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    return bounded(lambda: client.request(method, url, content=content, headers=headers))


@pytest.mark.parametrize(("case", "target"), case_params())
def test_bad_input_is_a_clear_problem_and_writes_nothing(
    watch: Watch, client: TestClient, world: TenantWorld, rows: Rows, case: Case, target: Target
) -> None:
    response = send(
        client,
        world,
        target.method,
        target.url(rows),
        case.content(target),
        case.content_type,
        replace=case.headers(target),
    )

    errors = case.errors(target) if case.errors is not None else None
    watch.refused(response, case.status, case.code, errors)
    if case.response_check is not None:
        case.response_check(response)


# --- Duplicated headers ----------------------------------------------------------------------


DUPLICATES: dict[str, Callable[[TenantWorld, TenantWorld], tuple[Headers, Headers]]] = {
    # (headers in place of the key's two, headers added after them)
    "X-Api-Key twice, identical": lambda w, s: ([], [("X-Api-Key", w.key.api_key)]),
    "X-Api-Key twice, ours then another tenant's": lambda w, s: (
        [],
        [("X-Api-Key", s.key.api_key)],
    ),
    "X-Api-Key twice, ours then garbage": lambda w, s: ([], [("X-Api-Key", "garbage")]),
    "X-Department-Id twice, identical": lambda w, s: (
        [],
        [("X-Department-Id", str(w.key.department_id))],
    ),
    "X-Department-Id twice, ours then another": lambda w, s: (
        [],
        [("X-Department-Id", str(s.key.department_id))],
    ),
}
DUPLICATE_TARGETS = (POST_CUSTOMER, POST_DEAL, PATCH_DEAL)


@pytest.mark.parametrize("duplicate", list(DUPLICATES))
@pytest.mark.parametrize("target", DUPLICATE_TARGETS, ids=[t.name for t in DUPLICATE_TARGETS])
def test_a_duplicated_credential_header_is_refused(
    watch: Watch,
    client: TestClient,
    world: TenantWorld,
    stranger: TenantWorld,
    rows: Rows,
    target: Target,
    duplicate: str,
) -> None:
    # X-Api-Key and X-Department-Id are single values (not lists, RFC 9110 5.3): two of them
    # are ambiguous, and a proxy that reads the other one than the app authorises another caller.
    replace, add = DUPLICATES[duplicate](world, stranger)
    body = json.dumps(target.body()).encode()

    response = send(
        client, world, target.method, target.url(rows), body, "application/json", replace, add
    )

    watch.refused(response)


@pytest.mark.parametrize("target", CREATES, ids=[t.name for t in CREATES])
def test_two_different_idempotency_keys_are_refused(
    watch: Watch, client: TestClient, world: TenantWorld, rows: Rows, target: Target
) -> None:
    add = [
        ("Idempotency-Key", f"first-{uuid.uuid4()}"),
        ("Idempotency-Key", f"second-{uuid.uuid4()}"),
    ]
    body = json.dumps(target.body()).encode()

    response = send(client, world, "POST", target.url(rows), body, "application/json", add=add)

    watch.refused(response)


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_two_different_content_types_are_refused(
    watch: Watch, client: TestClient, world: TenantWorld, rows: Rows, target: Target
) -> None:
    add = [("Content-Type", "application/json"), ("Content-Type", "text/plain")]
    body = json.dumps(target.body()).encode()

    response = send(client, world, target.method, target.url(rows), body, None, add=add)

    watch.refused(response)


# --- Concurrent identical requests -----------------------------------------------------------


def together(count: int, call: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """``count`` calls at once, released by a barrier so they really overlap; a test failure,
    not a stuck suite, when any of them does not come back."""
    barrier = threading.Barrier(count)
    outcomes: list[httpx.Response | BaseException] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            barrier.wait()
            result: httpx.Response | BaseException = call()
        except BaseException as exc:  # handed to the test thread below
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(ANSWER_WITHIN_SECONDS)
        if thread.is_alive():
            pytest.fail(f"no answer within {ANSWER_WITHIN_SECONDS} s: a request hangs")
    responses = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        responses.append(outcome)
    return responses


@pytest.mark.parametrize(
    ("target", "body", "created_rows"),
    [
        (POST_CUSTOMER, {"last_name": "Lovelace"}, {"customers": 1}),
        (
            POST_DEAL,
            {"name": "Engines", "customers": [{"last_name": "Lovelace"}, {"last_name": "Ada"}]},
            {"deals": 1, "customers": 2, "deal_customers": 2},
        ),
    ],
    ids=["customers", "deals"],
)
def test_ten_concurrent_posts_with_one_idempotency_key_create_exactly_once(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    target: Target,
    body: dict[str, object],
    created_rows: dict[str, int],
) -> None:
    before = counts(snapshot(database, world))
    headers = {**world.key.headers, "Idempotency-Key": f"concurrent-{uuid.uuid4()}"}

    responses = together(10, lambda: client.post(target.path, json=body, headers=headers))

    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {201, 409}, statuses
    for response in responses:
        if response.status_code == 409:
            assert_problem(response, 409, "idempotency_key_in_use")
    ids = {r.json()["id"] for r in responses if r.status_code == 201}
    assert len(ids) == 1, ids
    # A retry after the race replays the one response.
    replay = client.post(target.path, json=body, headers=headers)
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["id"] in ids
    after = counts(snapshot(database, world))
    expected = {
        name: before[name] + created_rows.get(name, 0)
        for name in before
        if name != "idempotency_records"
    }
    assert {name: after[name] for name in expected} == expected
    assert after["idempotency_records"] == before["idempotency_records"] + 1


@pytest.mark.parametrize("target", [PATCH_CUSTOMER, PATCH_DEAL], ids=["customer", "deal"])
def test_ten_concurrent_patches_with_one_if_match_apply_exactly_once(
    client: TestClient, database: Database, world: TenantWorld, rows: Rows, target: Target
) -> None:
    url = target.url(rows)
    version = client.get(url, headers=world.key.headers).headers["etag"]
    before = counts(snapshot(database, world))
    headers = {**world.key.headers, "If-Match": version}

    responses = together(
        10, lambda: client.patch(url, json={target.text_field: "Raced"}, headers=headers)
    )

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [412] * 9, statuses
    for response in responses:
        if response.status_code == 412:
            assert_problem(response, 412, "precondition_failed")
    now = client.get(url, headers=world.key.headers).headers["etag"]
    assert int(now.strip('"')) == int(version.strip('"')) + 1
    assert counts(snapshot(database, world)) == before


# --- POST /graphql ---------------------------------------------------------------------------

CREATE_DEAL = "mutation($input: DealInput!) { createDeal(input: $input) { id volume } }"
CREATE_CUSTOMER = "mutation($input: CustomerInput!) { createCustomer(input: $input) { id } }"


def graphql(
    client: TestClient, world: TenantWorld, content: bytes, content_type: str | None = None
) -> httpx.Response:
    return send(client, world, "POST", GRAPHQL, content, content_type or "application/json")


def operation(query: str, variables: dict[str, object] | None = None) -> bytes:
    return json.dumps({"query": query, "variables": variables or {}}).encode()


GRAPHQL_UNREADABLE: dict[str, tuple[bytes, int, str]] = {
    # A body GraphQL cannot read at all: (body, status, code); a 4xx problem, like REST's.
    "100,000 levels of [": (b"[" * DEEP, 400, "malformed_json"),
    "100,000 levels of {": (b'{"a":' * DEEP, 400, "malformed_json"),
    "100,000 levels in variables": (
        b'{"query": "{ departments { id } }", "variables": {"a": '
        + b"[" * DEEP
        + b"]" * DEEP
        + b"}}",
        400,
        "malformed_json",
    ),
    "invalid UTF-8": (b'{"query": "{ departments { id } }\xff\xfe"}', 400, "malformed_json"),
    "over 1 MiB": (
        operation("{ departments { id } }", {"pad": "a" * MIB}),
        413,
        "payload_too_large",
    ),
}


@pytest.mark.parametrize("label", list(GRAPHQL_UNREADABLE))
def test_graphql_refuses_an_unreadable_body_with_a_problem(
    watch: Watch, client: TestClient, world: TenantWorld, label: str
) -> None:
    content, status, code = GRAPHQL_UNREADABLE[label]

    watch.refused(graphql(client, world, content), status, code)


GRAPHQL_NOT_AN_OPERATION: dict[str, tuple[bytes, str | None]] = {
    # Bodies GraphQL reads but that are no operation: a 4xx, and in the service's error format.
    "raw NUL bytes": (b'\x00\x00{"query": "{ departments { id } }"}', None),
    "empty body": (b"", None),
    "a top-level array of 10,000 operations": (
        json.dumps([{"query": "{ departments { id } }"}] * MANY).encode(),
        None,
    ),
    "variables not an object": (b'{"query": "{ departments { id } }", "variables": [[]]}', None),
    "Content-Type text/plain": (operation("{ departments { id } }"), "text/plain"),
    "Content-Type form": (b"query=x", "application/x-www-form-urlencoded"),
}


@pytest.mark.parametrize("label", list(GRAPHQL_NOT_AN_OPERATION))
def test_graphql_refuses_a_body_that_is_no_operation_with_a_problem(
    watch: Watch, client: TestClient, world: TenantWorld, label: str
) -> None:
    content, content_type = GRAPHQL_NOT_AN_OPERATION[label]

    watch.refused(graphql(client, world, content, content_type))


GRAPHQL_BAD_VARIABLES: dict[str, tuple[str, dict[str, object], str, str | None]] = {
    # (query, input, code, the field an input error names)
    "volume as a string": (
        CREATE_DEAL,
        {"name": "d", "volume": "100"},
        "validation_failed",
        "volume",
    ),
    "volume as a padded string": (
        CREATE_DEAL,
        {"name": "d", "volume": " 1_0\n"},
        "validation_failed",
        "volume",
    ),
    "volume 1.5": (CREATE_DEAL, {"name": "d", "volume": 1.5}, "validation_failed", "volume"),
    "volume 1.0": (CREATE_DEAL, {"name": "d", "volume": 1.0}, "validation_failed", "volume"),
    "U+0000 in name": (CREATE_DEAL, {"name": "a\x00b"}, "validation_failed", "name"),
    "U+0000 in lastName": (CREATE_CUSTOMER, {"lastName": "\x00"}, "validation_failed", "lastName"),
    "10,000 customers": (
        CREATE_DEAL,
        {"name": "d", "customers": [{"lastName": "x"}] * MANY},
        "validation_failed",
        "customers",
    ),
    "an unknown field": (CREATE_DEAL, {"name": "d", "colour": "red"}, "validation_failed", None),
    "a 100-level array for the input": (
        CREATE_DEAL,
        {"name": "d", "customers": json.loads("[" * 100 + "]" * 100)},
        "validation_failed",
        None,
    ),
}


@pytest.mark.parametrize("label", list(GRAPHQL_BAD_VARIABLES))
def test_graphql_refuses_bad_variables_and_writes_nothing(
    watch: Watch, client: TestClient, world: TenantWorld, label: str
) -> None:
    query, value, code, field_name = GRAPHQL_BAD_VARIABLES[label]

    response = graphql(client, world, operation(query, {"input": value}))

    errors = watch.graphql_refused(response, code)
    if field_name is not None:
        assert field_name in {error["field"] for error in errors}, errors


def test_graphql_refuses_a_lone_surrogate_as_input_not_as_an_internal_error(
    watch: Watch, client: TestClient, world: TenantWorld
) -> None:
    # Valid JSON (json.loads reads "\ud800"), but no Unicode text: REST answers 400.
    content = b'{"query": "mutation($n: String!) { createDeal(input: {name: $n}) { id } }",'
    content += b' "variables": {"n": "\\ud800"}}'

    response = graphql(client, world, content)

    if response.status_code != 200:
        watch.refused(response, 400, "malformed_json")
    else:
        watch.graphql_refused(response, "validation_failed")


@pytest.mark.parametrize(
    ("name", "value", "status", "code"),
    [
        ("X-Api-Key", "dbk_" + "k" * LONG_HEADER, 401, "unauthenticated"),
        ("X-Department-Id", "d" * LONG_HEADER, 403, "forbidden"),
    ],
)
def test_graphql_refuses_very_long_credential_headers(
    watch: Watch,
    client: TestClient,
    world: TenantWorld,
    name: str,
    value: str,
    status: int,
    code: str,
) -> None:
    content = operation(CREATE_DEAL, {"input": {"name": "d"}})

    response = send(
        client, world, "POST", GRAPHQL, content, "application/json", replace=[(name, value)]
    )

    watch.refused(response, status, code)


@pytest.mark.parametrize("duplicate", list(DUPLICATES))
def test_graphql_refuses_a_duplicated_credential_header(
    watch: Watch, client: TestClient, world: TenantWorld, stranger: TenantWorld, duplicate: str
) -> None:
    replace, add = DUPLICATES[duplicate](world, stranger)
    content = operation(CREATE_DEAL, {"input": {"name": "d"}})

    response = send(client, world, "POST", GRAPHQL, content, "application/json", replace, add)

    watch.refused(response)
