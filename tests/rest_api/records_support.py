"""The synced records (customers, deals, activities) as their REST routes take them, for the
tests of what every one answers alike; ``record`` (conftest.py) runs a test once for each."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1/integration"


def refused_fields(response: Any) -> list[tuple[str, str]]:
    """The fields a 422 validation problem names, each with its code."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "validation_failed"
    return [(error["field"], error["code"]) for error in problem["errors"]]


def a_customer(client: TestClient, headers: dict[str, str]) -> str:
    """The id of a new customer of the headers' department (an activity's required parent)."""
    response = client.post(f"{API}/customers", json={"last_name": "Lovelace"}, headers=headers)
    assert response.status_code == 201, response.text
    customer: str = response.json()["id"]
    return customer


@dataclass(frozen=True)
class SyncedApi:
    """A synced record as its routes take it: ``label`` is a text field its tests write and
    read back; ``required`` gives the rest of a valid body in the department of the headers."""

    plural: str
    noun: str  # its event types' prefix
    label: str
    required: Callable[[TestClient, dict[str, str]], dict[str, Any]] = lambda client, headers: {}
    # An atomic batch names every failed operation (written in bulk), or its first (one by one).
    names_every_failure: bool = True
    # What fails one upsert of a batch by this record's own rules: the fields it adds to a valid
    # body, and the field and code its failure names.
    own_failures: tuple[tuple[dict[str, Any], str, str], ...] = ()

    def body(self, required: dict[str, Any], label: str, **fields: Any) -> dict[str, Any]:
        return {**required, self.label: label, **fields}

    def create(self, client: TestClient, headers: dict[str, str], label: str = "Made") -> Any:
        """A new record (its POST's 201 response), with ``label``."""
        body = self.body(self.required(client, headers), label)
        response = client.post(f"{API}/{self.plural}", json=body, headers=headers)
        assert response.status_code == 201, response.text
        return response

    def put(
        self,
        client: TestClient,
        headers: dict[str, str],
        external_id: str,
        body: dict[str, Any],
        **conditions: str,
    ) -> Any:
        return client.put(
            f"{API}/{self.plural}/by-external-id/{external_id}",
            json=body,
            headers={**headers, **conditions},
        )

    def batch(
        self,
        client: TestClient,
        headers: dict[str, str],
        operations: list[dict[str, Any]],
        *,
        atomic: bool = False,
    ) -> Any:
        return client.post(
            f"{API}/{self.plural}/batch",
            params={"atomic": "true"} if atomic else None,
            json={"operations": operations},
            headers=headers,
        )

    def upsert_operation(self, external_id: str, label: str = "L", **fields: Any) -> dict[str, Any]:
        """A batch's upsert of ``external_id``; ``fields`` holds the rest of its data."""
        data = {self.label: label, **fields}
        return {"op": "upsert", "external_id": external_id, "data": data}

    def create_operation(self, label: str = "L", **fields: Any) -> dict[str, Any]:
        """A batch's create; ``fields`` holds the rest of its data."""
        return {"op": "create", "data": {self.label: label, **fields}}

    def listed(self, client: TestClient, headers: dict[str, str]) -> list[dict[str, Any]]:
        """Every record of the headers' department, as its list pages give them, oldest first."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 100}
        while True:
            page = client.get(f"{API}/{self.plural}", params=params, headers=headers).json()
            found += page["data"]
            if page["next_cursor"] is None:
                return found
            params["cursor"] = page["next_cursor"]

    def labels(
        self, client: TestClient, headers: dict[str, str], external_id: str | None = None
    ) -> list[str]:
        params = {"limit": 100} if external_id is None else {"external_id": external_id}
        page = client.get(f"{API}/{self.plural}", params=params, headers=headers).json()
        return [item[self.label] for item in page["data"]]


@dataclass(frozen=True)
class SyncingKey:
    """A synced record's routes as one department's key calls them: each body holds the rest of
    a valid record in that department (``required``) beside the record's label."""

    client: TestClient
    record: SyncedApi
    headers: dict[str, str]
    required: dict[str, Any]

    def put(
        self,
        external_id: str,
        label: str,
        conditions: dict[str, str] | None = None,
        /,
        **fields: Any,
    ) -> Any:
        """The PUT by ``external_id``, with the conditional headers ``conditions``; ``fields``
        (the body's own ``external_id`` among them) go into the body."""
        body = self.record.body(self.required, label, **fields)
        return self.record.put(self.client, self.headers, external_id, body, **(conditions or {}))

    def upsert(self, external_id: str, label: str = "L", /, **fields: Any) -> dict[str, Any]:
        """A batch's upsert of a valid record, ``fields`` in place of its own."""
        return self.record.upsert_operation(external_id, label, **{**self.required, **fields})

    def create(self, label: str = "L", /, **fields: Any) -> dict[str, Any]:
        """A batch's create of a valid record, ``fields`` in place of its own."""
        return self.record.create_operation(label, **{**self.required, **fields})

    def batch(self, operations: list[dict[str, Any]], *, atomic: bool = False) -> Any:
        return self.record.batch(self.client, self.headers, operations, atomic=atomic)

    def labels(self, external_id: str | None = None) -> list[str]:
        return self.record.labels(self.client, self.headers, external_id)

    def events(self) -> list[tuple[str, str | None]]:
        """The department's events, each as its type and its record's external id."""
        page = self.client.get(f"{API}/events", params={"limit": 100}, headers=self.headers)
        return [(event["type"], event["data"].get("external_id")) for event in page.json()["data"]]


RECORDS = {
    "customers": SyncedApi(
        "customers",
        "customer",
        "last_name",
        own_failures=(({"email": "not an email"}, "email", "invalid_format"),),
    ),
    "deals": SyncedApi(
        "deals",
        "deal",
        "name",
        names_every_failure=False,
        own_failures=(
            ({"step_id": str(uuid.uuid4())}, "step_id", "not_found"),
            # An upsert leaves the deal's customers alone: it cannot name them.
            ({"customers": []}, "customers", "unknown_field"),
        ),
    ),
    "activities": SyncedApi(
        "activities",
        "activity",
        "subject",
        lambda client, headers: {"type": "call", "customer_id": a_customer(client, headers)},
        own_failures=(
            ({"deal_id": str(uuid.uuid4())}, "deal_id", "not_found"),
            ({"type": "lunch"}, "type", "invalid_choice"),
        ),
    ),
}
