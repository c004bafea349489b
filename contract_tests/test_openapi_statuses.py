"""Each operation answers exactly the statuses its OpenAPI document lists: every error path of
every route is driven against the real app on the real database, and the statuses seen are
compared with the document's, both ways (a status answered but not listed, and one listed that
no request gets)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from contract_tests.support import import_time_document
from dealbase.db.database import Database
from dealbase.edge.request_edge import MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES
from dealbase.ops import admin
from dealbase.platform.idempotency import repository as idempotency_records
from tests.support import TenantWorld

DOCUMENT = import_time_document()
API = "/api/v1/integration"

# Listed on every operation and driven by tests of their own (tests/rest_api/test_rate_limits*,
# tests/ops): a rate limit spent (429) and the database or the limits' store unavailable (503).
# 414 is the server's, before the app: tests/ops/test_serving.py drives it through a real one.
EVERYWHERE_NOT_DRIVEN = {
    414: "a target past the server's bound",
    429: "rate limits",
    503: "an unavailable database or Redis",
}
# An upsert whose insert finds the external id taken, and the record gone again when it looks
# for it (inserted and deleted by others between its two statements): a race no request here
# can stage. A deal's upsert is also 409 `conflict` in a department without pipeline steps,
# which no department made by the CLI is.
NOT_DRIVEN = {
    "upsert_customer": {409: "a race of three transactions"},
    "upsert_deal": {409: "a race of three transactions, or a department without steps"},
    "upsert_activity": {409: "a race of three transactions"},
}


@dataclass
class Probe:
    """Requests to one operation, each expected to get one status, which it records."""

    client: TestClient
    world: TenantWorld
    database: Database
    method: str
    path: str
    seen: dict[int, list[str]] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return self.world.key.headers

    def expect(
        self,
        status: int,
        why: str,
        *,
        at: dict[str, str] | None = None,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        **request: Any,
    ) -> httpx.Response:
        """Sends the operation's request to the path with ``at``'s parameters (any id by
        default), with the key's headers and ``headers``; asserts it got ``status``."""
        parameters = dict.fromkeys(_parameters_of(self.path), str(uuid.uuid4())) | (at or {})
        sent: list[tuple[str, str]] = (
            headers
            if isinstance(headers, list)
            else [*self.headers.items(), *(headers or {}).items()]
        )
        response: httpx.Response = self.client.request(
            self.method, API + self.path.format(**parameters), headers=sent, **request
        )
        assert response.status_code == status, (why, response.status_code, response.text)
        self.seen.setdefault(status, []).append(why)
        return response

    def made(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """A record created through the API, for the operation to act on."""
        response = self.client.post(f"{API}/{collection}", json=body, headers=self.headers)
        assert response.status_code == 201, response.text
        created: dict[str, Any] = response.json()
        return created

    def bad_bodies(self, **at: str) -> None:
        """A body that is not JSON (400) and one of another media type (415)."""
        self.expect(400, "malformed JSON", at=at, content=b'{"a": ', headers=_JSON)
        self.expect(415, "not JSON", at=at, content=b"x", headers={"Content-Type": "text/plain"})

    @contextmanager
    def key_in_use(self) -> Iterator[str]:
        """An Idempotency-Key whose first request is still running (its lock held)."""
        key = f"in-use-{secrets.token_hex(8)}"
        tenant = self.world.tenant
        with self.database.unit_of_work(tenant.scope) as uow:
            assert idempotency_records.try_lock(
                uow.connection, tenant.schema, self.world.key.key_id, key
            )
            yield key


_JSON = {"Content-Type": "application/json"}


def _parameters_of(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _external_id() -> str:
    return f"statuses-{secrets.token_hex(6)}"


# A version no record is at yet, and a list of versions past the header's 1,024 characters.
STALE = {"If-Match": '"999999"'}
TOO_LONG_IF_MATCH = {"If-Match": ", ".join(['"1"'] * 300)}

DRIVERS: dict[str, Callable[[Probe], None]] = {}


def drives(driver: Callable[[Probe], None]) -> Callable[[Probe], None]:
    """Registers the error paths of the operation the function is named after."""
    DRIVERS[driver.__name__] = driver
    return driver


def drive_the_edge(probe: Probe, body_cap: int) -> None:
    """What every operation answers before its route judges anything."""
    probe.expect(401, "no key", headers=[])
    other_department = {**probe.headers, "X-Department-Id": str(uuid.uuid4())}
    probe.expect(403, "another department", headers=list(other_department.items()))
    repeated = [*probe.headers.items(), ("X-Api-Key", probe.world.key.api_key)]
    probe.expect(400, "X-Api-Key twice", headers=repeated)
    probe.expect(413, "a body past the cap", content=b" " * (body_cap + 1), headers=_JSON)


# Customers


@drives
def create_customer(probe: Probe) -> None:
    taken = probe.made("customers", {"last_name": "Taken", "external_id": _external_id()})
    probe.expect(201, "created", json={"last_name": "Lovelace"})
    probe.expect(
        409, "external id taken", json={"last_name": "L", "external_id": taken["external_id"]}
    )
    with probe.key_in_use() as key:
        probe.expect(409, "key in use", json={"last_name": "L"}, headers={"Idempotency-Key": key})
    probe.expect(422, "no last_name", json={})
    probe.bad_bodies()


@drives
def list_customers(probe: Probe) -> None:
    probe.expect(200, "a page")
    probe.expect(422, "limit 0", params={"limit": 0})


@drives
def get_customer(probe: Probe) -> None:
    customer = probe.made("customers", {"last_name": "Read"})
    probe.expect(200, "read", at={"customer_id": customer["id"]})
    probe.expect(404, "unknown id")
    probe.expect(404, "no uuid", at={"customer_id": "no-uuid"})


@drives
def update_customer(probe: Probe) -> None:
    customer = probe.made("customers", {"last_name": "Update"})
    at = {"customer_id": customer["id"]}
    taken = probe.made("customers", {"last_name": "Taken", "external_id": _external_id()})
    probe.expect(200, "updated", at=at, json={"city": "Paris"})
    probe.expect(404, "unknown id", json={"city": "Paris"})
    probe.expect(409, "external id taken", at=at, json={"external_id": taken["external_id"]})
    probe.expect(412, "stale If-Match", at=at, json={"city": "Rome"}, headers=STALE)
    probe.expect(422, "last_name cleared", at=at, json={"last_name": None})
    probe.bad_bodies(**at)


@drives
def delete_customer(probe: Probe) -> None:
    customer = probe.made("customers", {"last_name": "Delete"})
    at = {"customer_id": customer["id"]}
    probe.expect(412, "stale If-Match", at=at, headers=STALE)
    probe.expect(422, "If-Match too long", at=at, headers=TOO_LONG_IF_MATCH)
    probe.expect(204, "deleted", at=at)
    probe.expect(404, "deleted already", at=at)


@drives
def upsert_customer(probe: Probe) -> None:
    at = {"external_id": _external_id()}
    probe.expect(201, "created", at=at, json={"last_name": "Upsert"})
    probe.expect(200, "updated", at=at, json={"last_name": "Upsert", "city": "Oslo"})
    probe.expect(
        412,
        "exists, If-None-Match: *",
        at=at,
        json={"last_name": "U"},
        headers={"If-None-Match": "*"},
    )
    probe.expect(422, "no last_name", at=at, json={"city": "Oslo"})
    probe.bad_bodies(**at)


def drive_a_batch(probe: Probe, operation: dict[str, Any]) -> None:
    probe.expect(200, "one result per operation", json={"operations": [operation]})
    with probe.key_in_use() as key:
        probe.expect(
            409, "key in use", json={"operations": [operation]}, headers={"Idempotency-Key": key}
        )
    probe.expect(422, "no operations", json={"operations": []})
    probe.bad_bodies()


@drives
def batch_customers(probe: Probe) -> None:
    drive_a_batch(probe, {"op": "create", "data": {"last_name": "Batch"}})


# Deals


@drives
def create_deal(probe: Probe) -> None:
    taken = probe.made("deals", {"name": "Taken", "external_id": _external_id()})
    probe.expect(201, "created", json={"name": "Engine"})
    probe.expect(409, "external id taken", json={"name": "E", "external_id": taken["external_id"]})
    probe.expect(422, "no name", json={})
    probe.bad_bodies()


@drives
def list_deals(probe: Probe) -> None:
    probe.expect(200, "a page")
    probe.expect(422, "step_id no uuid", params={"step_id": "no-uuid"})


@drives
def get_deal(probe: Probe) -> None:
    deal = probe.made("deals", {"name": "Read"})
    probe.expect(200, "read", at={"deal_id": deal["id"]})
    probe.expect(404, "unknown id")


@drives
def update_deal(probe: Probe) -> None:
    at = {"deal_id": probe.made("deals", {"name": "Update"})["id"]}
    taken = probe.made("deals", {"name": "Taken", "external_id": _external_id()})
    probe.expect(200, "updated", at=at, json={"volume": 5})
    probe.expect(404, "unknown id", json={"volume": 5})
    probe.expect(409, "external id taken", at=at, json={"external_id": taken["external_id"]})
    probe.expect(412, "stale If-Match", at=at, json={"volume": 6}, headers=STALE)
    probe.expect(422, "step_id cleared", at=at, json={"step_id": None})
    probe.bad_bodies(**at)


@drives
def delete_deal(probe: Probe) -> None:
    at = {"deal_id": probe.made("deals", {"name": "Delete"})["id"]}
    probe.expect(412, "stale If-Match", at=at, headers=STALE)
    probe.expect(422, "If-Match too long", at=at, headers=TOO_LONG_IF_MATCH)
    probe.expect(204, "deleted", at=at)
    probe.expect(404, "deleted already", at=at)


@drives
def link_customer(probe: Probe) -> None:
    at = {"deal_id": probe.made("deals", {"name": "Link"})["id"]}
    link = {"customer_id": probe.made("customers", {"last_name": "Linked"})["id"]}
    probe.expect(200, "linked", at=at, json=link)
    probe.expect(404, "unknown deal", json=link)
    with probe.key_in_use() as key:
        probe.expect(409, "key in use", at=at, json=link, headers={"Idempotency-Key": key})
    probe.expect(422, "unknown customer", at=at, json={"customer_id": str(uuid.uuid4())})
    probe.bad_bodies(**at)


@drives
def unlink_customer(probe: Probe) -> None:
    customer = probe.made("customers", {"last_name": "Unlinked"})
    deal = probe.made("deals", {"name": "Unlink"})
    link = probe.client.post(
        f"{API}/deals/{deal['id']}/customers",
        json={"customer_id": customer["id"]},
        headers=probe.headers,
    )
    assert link.status_code == 200, link.text
    at = {"deal_id": deal["id"], "customer_id": customer["id"]}
    probe.expect(204, "unlinked", at=at)
    probe.expect(404, "not linked", at=at)


@drives
def upsert_deal(probe: Probe) -> None:
    at = {"external_id": _external_id()}
    probe.expect(201, "created", at=at, json={"name": "Upsert"})
    probe.expect(200, "updated", at=at, json={"name": "Upsert", "volume": 3})
    probe.expect(
        412,
        "absent, If-Match",
        at={"external_id": _external_id()},
        json={"name": "U"},
        headers={"If-Match": "*"},
    )
    probe.expect(422, "step_id null", at=at, json={"name": "U", "step_id": None})
    probe.bad_bodies(**at)


@drives
def batch_deals(probe: Probe) -> None:
    drive_a_batch(probe, {"op": "upsert", "external_id": _external_id(), "data": {"name": "Batch"}})


# Activities


def _activity(probe: Probe) -> dict[str, Any]:
    return {"type": "call", "customer_id": probe.made("customers", {"last_name": "Called"})["id"]}


@drives
def create_activity(probe: Probe) -> None:
    body = _activity(probe)
    taken = probe.made("activities", {**body, "external_id": _external_id()})
    probe.expect(201, "created", json=body)
    probe.expect(409, "external id taken", json={**body, "external_id": taken["external_id"]})
    probe.expect(422, "unknown customer", json={**body, "customer_id": str(uuid.uuid4())})
    probe.bad_bodies()


@drives
def list_activities(probe: Probe) -> None:
    probe.expect(200, "a page")
    probe.expect(422, "cursor of no list", params={"cursor": "A" * 30})


@drives
def get_activity(probe: Probe) -> None:
    activity = probe.made("activities", _activity(probe))
    probe.expect(200, "read", at={"activity_id": activity["id"]})
    probe.expect(404, "unknown id")


@drives
def update_activity(probe: Probe) -> None:
    body = _activity(probe)
    at = {"activity_id": probe.made("activities", body)["id"]}
    taken = probe.made("activities", {**body, "external_id": _external_id()})
    probe.expect(200, "updated", at=at, json={"subject": "Again"})
    probe.expect(404, "unknown id", json={"subject": "Again"})
    probe.expect(409, "external id taken", at=at, json={"external_id": taken["external_id"]})
    probe.expect(412, "stale If-Match", at=at, json={"subject": "Once"}, headers=STALE)
    probe.expect(422, "type cleared", at=at, json={"type": None})
    probe.bad_bodies(**at)


@drives
def delete_activity(probe: Probe) -> None:
    at = {"activity_id": probe.made("activities", _activity(probe))["id"]}
    probe.expect(412, "stale If-Match", at=at, headers=STALE)
    probe.expect(422, "If-Match too long", at=at, headers=TOO_LONG_IF_MATCH)
    probe.expect(204, "deleted", at=at)
    probe.expect(404, "deleted already", at=at)


@drives
def upsert_activity(probe: Probe) -> None:
    body = _activity(probe)
    at = {"external_id": _external_id()}
    probe.expect(201, "created", at=at, json=body)
    probe.expect(200, "updated", at=at, json={**body, "subject": "Again"})
    probe.expect(412, "exists, If-Match stale", at=at, json=body, headers=STALE)
    probe.expect(422, "no type", at=at, json={"customer_id": body["customer_id"]})
    probe.bad_bodies(**at)


@drives
def batch_activities(probe: Probe) -> None:
    drive_a_batch(probe, {"op": "create", "data": _activity(probe)})


# The department


@drives
def get_department(probe: Probe) -> None:
    probe.expect(200, "the department")


@drives
def list_steps(probe: Probe) -> None:
    probe.expect(200, "the steps")


@drives
def list_employees(probe: Probe) -> None:
    probe.expect(200, "a page")
    probe.expect(422, "limit 101", params={"limit": 101})


# Webhooks

WEBHOOK = {"url": "https://8.8.8.8/hooks", "events": ["*"]}


def _endpoint(probe: Probe) -> dict[str, str]:
    return {"webhook_id": probe.made("webhooks", WEBHOOK)["id"]}


@drives
def create_webhook_endpoint(probe: Probe) -> None:
    probe.expect(201, "created", json=WEBHOOK)
    with probe.key_in_use() as key:
        probe.expect(409, "key in use", json=WEBHOOK, headers={"Idempotency-Key": key})
    probe.expect(422, "an inward address", json={**WEBHOOK, "url": "https://127.0.0.1/"})
    probe.bad_bodies()


@drives
def list_webhook_endpoints(probe: Probe) -> None:
    probe.expect(200, "a page")
    probe.expect(422, "limit no integer", params={"limit": "many"})


@drives
def get_webhook_endpoint(probe: Probe) -> None:
    probe.expect(200, "read", at=_endpoint(probe))
    probe.expect(404, "unknown id")


@drives
def update_webhook_endpoint(probe: Probe) -> None:
    at = _endpoint(probe)
    probe.expect(200, "updated", at=at, json={"enabled": False})
    probe.expect(404, "unknown id", json={"enabled": False})
    probe.expect(412, "stale If-Match", at=at, json={"enabled": True}, headers=STALE)
    probe.expect(422, "enabled cleared", at=at, json={"enabled": None})
    probe.bad_bodies(**at)


@drives
def delete_webhook_endpoint(probe: Probe) -> None:
    at = _endpoint(probe)
    probe.expect(412, "stale If-Match", at=at, headers=STALE)
    probe.expect(422, "If-Match too long", at=at, headers=TOO_LONG_IF_MATCH)
    probe.expect(204, "deleted", at=at)
    probe.expect(404, "deleted already", at=at)


@drives
def rotate_webhook_secret(probe: Probe) -> None:
    at = _endpoint(probe)
    probe.expect(200, "rotated", at=at)
    probe.expect(404, "unknown id")
    probe.expect(412, "stale If-Match", at=at, headers=STALE)
    probe.expect(422, "If-Match too long", at=at, headers=TOO_LONG_IF_MATCH)


@drives
def list_webhook_deliveries(probe: Probe) -> None:
    probe.expect(200, "a page", at=_endpoint(probe))
    probe.expect(404, "unknown endpoint")
    probe.expect(422, "limit 0", at=_endpoint(probe), params={"limit": 0})


def _test_delivery(probe: Probe, endpoint: dict[str, str]) -> str:
    response = probe.client.post(
        f"{API}/webhooks/{endpoint['webhook_id']}/test", headers=probe.headers
    )
    assert response.status_code == 202, response.text
    delivery_id: str = response.json()["id"]
    return delivery_id


BAD_IDEMPOTENCY_KEY = {"Idempotency-Key": "k" * 256}


@drives
def redeliver_webhook_delivery(probe: Probe) -> None:
    endpoint = _endpoint(probe)
    at = {**endpoint, "delivery_id": _test_delivery(probe, endpoint)}
    probe.expect(202, "pending again", at=at)
    probe.expect(404, "unknown delivery", at=endpoint)
    with probe.key_in_use() as key:
        probe.expect(409, "key in use", at=at, headers={"Idempotency-Key": key})
    probe.expect(422, "a key of 256 characters", at=at, headers=BAD_IDEMPOTENCY_KEY)


@drives
def send_test_webhook(probe: Probe) -> None:
    at = _endpoint(probe)
    probe.expect(202, "a test delivery", at=at)
    probe.expect(404, "unknown endpoint")
    with probe.key_in_use() as key:
        probe.expect(409, "key in use", at=at, headers={"Idempotency-Key": key})
    probe.expect(422, "a key of 256 characters", at=at, headers=BAD_IDEMPOTENCY_KEY)


# Events


@drives
def list_events(probe: Probe) -> None:
    probe.expect(200, "a page")
    probe.expect(422, "an unknown type", params={"types": "customer.vanished"})


# Custom fields: a tenant-wide key changes them (a department key is 403, from the edge's drive).

_FIELD = {"record": "customer", "label": "Field", "type": "text"}


def _tenant_wide(probe: Probe) -> list[tuple[str, str]]:
    issued = admin.issue_key(probe.database, probe.world.tenant.id, None, "fields")
    return [("X-Api-Key", issued.api_key)]


def _field(probe: Probe, headers: list[tuple[str, str]], **body: Any) -> dict[str, str]:
    """A field of the probe's tenant, as the ``at`` of its path."""
    response = probe.client.post(
        f"{API}/custom-fields",
        json={**_FIELD, "name": f"f_{secrets.token_hex(6)}", **body},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return {"field_id": response.json()["id"]}


@drives
def define_custom_field(probe: Probe) -> None:
    headers = _tenant_wide(probe)
    name = f"f_{secrets.token_hex(6)}"
    probe.expect(201, "defined", json={**_FIELD, "name": name}, headers=headers)
    probe.expect(409, "name taken", json={**_FIELD, "name": name}, headers=headers)
    probe.expect(422, "a reserved name", json={**_FIELD, "name": "email"}, headers=headers)
    probe.expect(400, "malformed JSON", content=b'{"a": ', headers=[*headers, *_JSON.items()])
    probe.expect(415, "not JSON", content=b"x", headers=[*headers, ("Content-Type", "text/plain")])


@drives
def list_custom_fields(probe: Probe) -> None:
    probe.expect(200, "all of them")
    probe.expect(422, "an unknown record", params={"record": "lead"})


@drives
def get_custom_field(probe: Probe) -> None:
    probe.expect(200, "read", at=_field(probe, _tenant_wide(probe)))
    probe.expect(404, "unknown id")


def _twins(probe: Probe, column: str) -> None:
    """Two customers of the department sharing a value of ``column``."""
    customers = f'"{probe.world.tenant.schema}".customers'
    with probe.database.control() as connection:
        connection.execute(
            text(
                f"INSERT INTO {customers} (id, department_id, last_name, created_at,"  # noqa: S608 (names of ours)
                f" updated_at, {column}) SELECT gen_random_uuid(), :department, 'Twin', now(),"
                " now(), 'same' FROM generate_series(1, 2)"
            ),
            {"department": probe.world.department.id},
        )


@drives
def change_custom_field(probe: Probe) -> None:
    headers = _tenant_wide(probe)
    name = f"f_{secrets.token_hex(6)}"
    at = _field(probe, headers, name=name)
    probe.expect(200, "relabelled", at=at, json={"label": "Other"}, headers=headers)
    probe.expect(404, "unknown id", json={"label": "Other"}, headers=headers)
    stale = [*headers, *STALE.items()]
    probe.expect(412, "stale If-Match", at=at, json={"label": "L"}, headers=stale)
    probe.expect(422, "a narrower type", at=at, json={"type": "integer"}, headers=headers)
    json_headers = [*headers, *_JSON.items()]
    probe.expect(400, "malformed JSON", at=at, content=b'{"a": ', headers=json_headers)
    text_plain = [*headers, ("Content-Type", "text/plain")]
    probe.expect(415, "not JSON", at=at, content=b"x", headers=text_plain)
    _twins(probe, f"cf_{name}")
    probe.expect(409, "values repeat", at=at, json={"unique": True}, headers=headers)


@drives
def delete_custom_field(probe: Probe) -> None:
    headers = _tenant_wide(probe)
    at = _field(probe, headers)
    probe.expect(409, "not archived", at=at, headers=headers)
    probe.client.patch(
        f"{API}/custom-fields/{at['field_id']}", json={"archived": True}, headers=headers
    )
    probe.expect(412, "stale If-Match", at=at, headers=[*headers, *STALE.items()])
    probe.expect(422, "If-Match too long", at=at, headers=[*headers, *TOO_LONG_IF_MATCH.items()])
    probe.expect(204, "deleted", at=at, headers=headers)
    probe.expect(404, "deleted already", at=at, headers=headers)


# The tenant's own document: any key of the tenant reads it; nothing else of the request is
# judged (the edge's drive gives its 400, 401, 403 and 413).


@drives
def get_tenant_openapi_document(probe: Probe) -> None:
    response = probe.expect(200, "the tenant's document")
    assert str(probe.world.tenant.id) in response.json()["info"]["title"]


def _operations() -> dict[str, tuple[str, str, set[int]]]:
    """Each operation of the document by its id: method, path (under the API's) and statuses."""
    return {
        operation["operationId"]: (
            method.upper(),
            path.removeprefix(API),
            {int(status) for status in operation["responses"]},
        )
        for path, operations in DOCUMENT["paths"].items()
        for method, operation in operations.items()
    }


OPERATIONS = _operations()


def test_every_operation_of_the_document_has_its_error_paths_driven() -> None:
    assert sorted(DRIVERS) == sorted(OPERATIONS)


@pytest.mark.parametrize("operation_id", sorted(OPERATIONS))
def test_an_operation_answers_exactly_the_statuses_its_document_lists(
    operation_id: str, contract_app: FastAPI, contract_world: TenantWorld, database: Database
) -> None:
    method, path, documented = OPERATIONS[operation_id]
    probe = Probe(TestClient(contract_app), contract_world, database, method, path)
    body_cap = MAX_BATCH_BODY_BYTES if path.endswith("/batch") else MAX_BODY_BYTES

    drive_the_edge(probe, body_cap)
    DRIVERS[operation_id](probe)

    not_driven = set(EVERYWHERE_NOT_DRIVEN) | set(NOT_DRIVEN.get(operation_id, {}))
    assert not set(probe.seen) & not_driven
    assert set(probe.seen) | not_driven == documented, probe.seen
