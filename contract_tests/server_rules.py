"""Rules the server enforces on purpose that no JSON Schema can state, and the narrow adaptations
of generated requests that keep the contract suite from reporting them as findings.

Each adaptation rewrites only a value the document accepts, into another value the document
accepts, and only where the rule applies. A negative case therefore stays negative (its violation
is elsewhere), and schemathesis re-validates a case changed in place, so its positive or negative
label stays true and every check still judges it. Nothing here widens an expected status.

The rules (issue 3 and the field descriptions in the document):

- An id a body refers to (``customer_id``, ``deal_id``, ``employee_id``, ``step_id``) must name a
  row of the caller's department, or the answer is 422 ``not_found``. A generated uuid never does.
- ``cursor`` (the events feed's ``after``) is opaque: only a ``next_cursor`` the API returned,
  under the same filters, is valid; a random pattern-valid one is 422 ``invalid_cursor``.
- ``birthday`` is a date from 1850-01-01 to today, else 422 ``out_of_range``.
- A moment (``due_at``, ``done_at``) is kept in UTC: one that falls before the year 1 or after
  9999 there (``0001-01-01T00:00:00+03:04``) is 422 ``out_of_range``.
- ``If-Match`` names the resource's current ETag, which a generator cannot know: any other
  value is 412 on an existing resource (the stateful phase reaches real ones).
- An ``Idempotency-Key`` sent again with a different request is 422 ``idempotency_key_reused``.
  The generator draws keys from a small space (the coverage phase sends the same boundary values
  to every operation), so it reuses keys without meaning to.

- An external id is unique in its department: creating with one already taken is 409 (a status
  the contract allows). An upsert's ``If-Match`` and ``If-None-Match`` depend on whether its
  record exists, which a generator cannot know (412 either way), so both are dropped there; its
  body's ``external_id`` may only repeat the path's (else 422 ``mismatch``), so it is made to.
  An upsert's path names no row that could be missing (the record is created), so the ids its
  body refers to (a deal's ``step_id``, an activity's ``customer_id``) are made real ones.
- An atomic batch (``atomic=true``) fails whole, 422 ``batch_rejected``, when any operation
  fails for a reason no schema states (an external id taken, or named twice in the batch, or
  a reference to no row): generated batches are sent per operation, whose answer is 200 with a
  result for each operation, failed or not.

- A webhook endpoint's ``url`` must lead to a public address (a name is resolved, and there is
  no network here): a string of the document's shape becomes an https URL to a public IP.

- A record's ``custom_fields`` names only fields the tenant has defined (GET /custom-fields),
  each of its own type; any other key is 422 ``unknown_field``. The public document's object is
  free (the tenant's own document types it); the suite's tenant defines none, so a generated
  object is sent empty. A tenant's own document types the object, field by field: what it
  generates there is sent as it is, an integer or a moment of a custom field adapted as the
  record's own (below).

- An integer field takes a JSON integer: ``302.0`` is 422 ``wrong_type`` (strict JSON types),
  though JSON Schema counts it as an integer, so the generator sends it as valid data.
"""

from __future__ import annotations

import itertools
import json
import re
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import schemathesis
from schemathesis.core import NOT_SET

from dealbase.platform.custom_fields.rules import FIELDS_PER_RECORD
from dealbase.platform.validation import EXTERNAL_ID_PATTERN

IDEMPOTENCY_KEY = "Idempotency-Key"
IF_MATCH = "If-Match"
MAX_IF_MATCH = 1024
# The lists page with ``cursor``, the events feed with ``after``.
CURSORS = ("cursor", "after")
BIRTHDAY = "birthday"
EARLIEST_BIRTHDAY = date(1850, 1, 1)
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class DepartmentRows:
    """Real rows of the suite's department, for bodies that refer to one."""

    customer_id: str
    deal_id: str
    employee_id: str
    step_id: str

    def by_field(self) -> dict[str, str]:
        return {
            "customer_id": self.customer_id,
            "deal_id": self.deal_id,
            "employee_id": self.employee_id,
            "step_id": self.step_id,
        }


@dataclass
class ServerRules:
    """The adaptations, with the patterns the document states for the values they rewrite."""

    document: Mapping[str, Any]
    _requests_by_key: dict[str, str] = field(default_factory=dict)
    _integer_fields: frozenset[str] = field(init=False)
    _moment_fields: frozenset[str] = field(init=False)
    # Whether a body's custom_fields is the public document's free object (or a tenant's, typed).
    _custom_fields_free: bool = field(init=False)
    _serial: Iterator[int] = field(default_factory=itertools.count)

    def adapt(
        self, case: schemathesis.Case[Any], rows: DepartmentRows, *, real_path_ids: bool = False
    ) -> None:
        """Rewrite ``case`` in place; the key goes last, as it depends on the final request.

        ``real_path_ids``: the path's ids may name real rows (the stateful phase follows links).
        """
        self._drop_forged_cursor(case)
        _drop_guessed_if_match(case)
        _upserts_unconditional_and_consistent(case)
        _batches_per_operation(case)
        _clamp_birthday(case)
        if self._custom_fields_free:
            _custom_fields_emptied(case.body)
        _moments_within_utc_years(case.body, self._moment_fields)
        _webhook_url_to_a_public_address(case)
        _integral_floats_as_integers(case.body, self._integer_fields)
        _refer_to_department_rows(case, rows, real_path_ids=real_path_ids)
        self._keep_idempotency_keys_unshared(case)

    def __post_init__(self) -> None:
        properties = _properties(self.document)
        self._integer_fields = frozenset(
            name
            for name, prop in properties
            if any(branch.get("type") == "integer" for branch in prop.get("anyOf", [prop]))
        )
        custom = [
            branch
            for name, prop in properties
            if name == CUSTOM_FIELDS
            for branch in prop.get("anyOf", [prop])
        ]
        self._moment_fields = frozenset(MOMENTS) | {
            name
            for values in custom
            for name, prop in values.get("properties", {}).items()
            if any(branch.get("format") == "date-time" for branch in prop.get("anyOf", [prop]))
        }
        self._custom_fields_free = any(
            values.get("additionalProperties") is True for values in custom
        )

    def _drop_forged_cursor(self, case: schemathesis.Case[Any]) -> None:
        # No valid cursor can be generated (it is a keyset position plus a hash of the filters), so
        # a pattern-valid one is dropped and the list is fetched from its start. A cursor the
        # pattern rejects stays: that is a negative case the server must refuse.
        query = case.query
        for name in CURSORS:
            if not query or name not in query:
                continue
            pattern = self._string_pattern(case, "query", name)
            if pattern is not None and _matches(pattern, query[name]):
                del query[name]

    def _keep_idempotency_keys_unshared(self, case: schemathesis.Case[Any]) -> None:
        # The same key with the same request is a replay (and stays one, so replays are fuzzed
        # too); the same key with a different request gets a fresh key of the same shape.
        headers = case.headers
        if not headers or IDEMPOTENCY_KEY not in headers:
            return
        generated = key = headers[IDEMPOTENCY_KEY]
        pattern = self._string_pattern(case, "header", IDEMPOTENCY_KEY)
        if pattern is None or not _matches(pattern, key):
            return
        request = _request_identity(case)
        while self._requests_by_key.setdefault(key, request) != request:
            key = with_suffix(generated, f"-{next(self._serial)}")
            if not _matches(pattern, key):
                raise AssertionError(f"the unshared key {key!r} left the pattern {pattern!r}")
        headers[IDEMPOTENCY_KEY] = key

    def _string_pattern(self, case: schemathesis.Case[Any], location: str, name: str) -> str | None:
        operation = self.document["paths"][case.operation.path][case.operation.method.lower()]
        for parameter in operation.get("parameters", []):
            if parameter["in"] == location and parameter["name"].lower() == name.lower():
                schema = parameter["schema"]
                for branch in schema.get("anyOf", [schema]):
                    if branch.get("type") == "string" and "pattern" in branch:
                        return str(branch["pattern"])
        return None


UPSERT_PATH = "/by-external-id/{external_id}"
PRECONDITIONS = ("if-match", "if-none-match")


def _upserts_unconditional_and_consistent(case: schemathesis.Case[Any]) -> None:
    if not case.operation.path.endswith(UPSERT_PATH):
        return
    headers = case.headers
    if headers:
        for name in [name for name in headers if name.lower() in PRECONDITIONS]:
            del headers[name]
    # Only a valid id replaces a valid one: a negative case stays negative. The stateful phase
    # holds path parameters percent-encoded (z%3Dm for z=m); the server reads them decoded.
    path_id = (case.path_parameters or {}).get("external_id")
    if isinstance(path_id, str):
        path_id = urllib.parse.unquote(path_id)
    body = case.body
    if (
        isinstance(body, dict)
        and isinstance(body.get("external_id"), str)
        and isinstance(path_id, str)
        and _matches(EXTERNAL_ID_PATTERN, body["external_id"])
        and _matches(EXTERNAL_ID_PATTERN, path_id)
    ):
        body["external_id"] = path_id


def _batches_per_operation(case: schemathesis.Case[Any]) -> None:
    if case.operation.path.endswith("/batch") and case.query and "atomic" in case.query:
        del case.query["atomic"]


def _drop_guessed_if_match(case: schemathesis.Case[Any]) -> None:
    # `*` (any version) stays, and so does a value over the document's 1,024 characters: that is
    # a negative case the server must refuse.
    headers = case.headers
    if not headers:
        return
    for name in [name for name in headers if name.lower() == IF_MATCH.lower()]:
        value = headers[name]
        if isinstance(value, str) and value.strip() != "*" and len(value) <= MAX_IF_MATCH:
            del headers[name]


def _clamp_birthday(case: schemathesis.Case[Any]) -> None:
    # Valid dates outside 1850-01-01..today are out of range by design (the field's description
    # says so; JSON Schema has no bound for dates). Customers come alone or inside a deal's
    # `customers`, hence the walk. A day's margin keeps a run over midnight in range.
    _clamp_birthdays_in(case.body)


def _clamp_birthdays_in(value: object) -> None:
    if isinstance(value, list):
        for item in value:
            _clamp_birthdays_in(item)
        return
    if not isinstance(value, dict):
        return
    for item in value.values():
        _clamp_birthdays_in(item)
    birthday = _calendar_date(value.get(BIRTHDAY))
    if birthday is None:
        return  # absent, null, or not a date: the latter a negative case the server must refuse
    latest = date.today() - timedelta(days=1)
    clamped = min(max(birthday, EARLIEST_BIRTHDAY), latest)
    if clamped != birthday:
        value[BIRTHDAY] = clamped.isoformat()


CUSTOM_FIELDS = "custom_fields"
CUSTOM_FIELDS_LIMIT = FIELDS_PER_RECORD


def _custom_fields_emptied(value: object) -> None:
    # Customers come alone, inside a deal's `customers` or a batch's operations: hence the walk.
    if isinstance(value, list):
        for item in value:
            _custom_fields_emptied(item)
        return
    if not isinstance(value, dict):
        return
    for item in value.values():
        _custom_fields_emptied(item)
    given = value.get(CUSTOM_FIELDS)
    # One of more than the document's maxProperties stays: a negative case.
    if isinstance(given, dict) and len(given) <= CUSTOM_FIELDS_LIMIT:
        value[CUSTOM_FIELDS] = {}


MOMENTS = ("due_at", "done_at")
# The years whose moments an offset can carry out of 1 to 9999 in UTC.
_EDGE_YEAR = re.compile(r"^(0001|9999)(-\d{2}-\d{2}[Tt ])")


def _moments_within_utc_years(value: object, names: frozenset[str]) -> None:
    # `names`: the records' moments, and a tenant's custom fields of type timestamp.
    if isinstance(value, list):
        for item in value:
            _moments_within_utc_years(item, names)
        return
    if not isinstance(value, dict):
        return
    for item in value.values():
        _moments_within_utc_years(item, names)
    for name in names:
        moment = value.get(name)
        if isinstance(moment, str) and _EDGE_YEAR.match(moment):
            value[name] = _EDGE_YEAR.sub(r"2000\2", moment)


WEBHOOK_URL = "url"
MAX_WEBHOOK_URL = 2048
PUBLIC_WEBHOOK_URL = "https://8.8.8.8/hooks"


def _webhook_url_to_a_public_address(case: schemathesis.Case[Any]) -> None:
    # Only a value the document accepts (a string of at most 2048 characters without U+0000):
    # another stays, as a negative case the server must refuse.
    body = case.body
    if "/webhooks" not in case.path or not isinstance(body, dict):
        return
    url = body.get(WEBHOOK_URL)
    if isinstance(url, str) and len(url) <= MAX_WEBHOOK_URL and "\x00" not in url:
        body[WEBHOOK_URL] = PUBLIC_WEBHOOK_URL


def _properties(document: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every property of the document's component schemas, with the custom fields' inside a
    tenant's typed ``custom_fields``."""
    found: list[tuple[str, Any]] = []
    for schema in document["components"]["schemas"].values():
        for name, prop in schema.get("properties", {}).items():
            found.append((name, prop))
            if name == CUSTOM_FIELDS:
                for branch in prop.get("anyOf", [prop]):
                    found += branch.get("properties", {}).items()
    return found


def _calendar_date(value: object) -> date | None:
    if not isinstance(value, str) or not _ISO_DATE.fullmatch(value):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def _integral_floats_as_integers(value: object, integer_fields: frozenset[str]) -> None:
    # Only a float with no fraction, in a field the document types as integer: `302.5` stays, as
    # a negative case the server must refuse.
    if isinstance(value, list):
        for item in value:
            _integral_floats_as_integers(item, integer_fields)
    elif isinstance(value, dict):
        for name, item in value.items():
            if name in integer_fields and isinstance(item, float) and item.is_integer():
                value[name] = int(item)
            else:
                _integral_floats_as_integers(item, integer_fields)


def _refer_to_department_rows(
    case: schemathesis.Case[Any], rows: DepartmentRows, *, real_path_ids: bool
) -> None:
    # Where the path names no resource, or a real one, the body's references are what the server
    # judges. Where it names a random one (stateless runs), the answer must be 404 whatever the
    # body says, so the references stay random and the suite sees which the server judges first.
    # An upsert's path names a record by external id, which answers no 404: it is created.
    body = case.body
    names_a_row = bool(case.path_parameters) and not case.operation.path.endswith(UPSERT_PATH)
    if (names_a_row and not real_path_ids) or not isinstance(body, dict):
        return
    for name, real_id in rows.by_field().items():
        value = body.get(name)
        if isinstance(value, str) and _is_uuid(value):
            body[name] = real_id


def _request_identity(case: schemathesis.Case[Any]) -> str:
    """What the server's fingerprint covers: method, path and body (key order aside)."""
    body = None if case.body is NOT_SET else case.body
    return json.dumps(
        [case.method, case.operation.path, case.path_parameters, body],
        sort_keys=True,
        default=repr,
    )


def with_suffix(key: str, suffix: str) -> str:
    """``key`` ending in ``suffix``, its quotes (if any) and length kept within 255."""
    quoted = len(key) >= 2 and key.startswith('"') and key.endswith('"')
    inner = key[1:-1] if quoted else key
    inner = inner[: 255 - len(suffix)] + suffix
    return f'"{inner}"' if quoted else inner


def _matches(pattern: str, value: object) -> bool:
    return isinstance(value, str) and re.search(pattern, value) is not None


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
