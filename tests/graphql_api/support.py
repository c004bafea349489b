"""Helpers for the GraphQL tests: send an operation, read its data or its errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.support import TenantWorld

GRAPHQL = "/graphql"


def gql(
    client: TestClient,
    query: str,
    variables: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON body of a POST to /graphql, which answers 200 for every operation it ran."""
    response = client.post(
        GRAPHQL, json={"query": query, "variables": dict(variables or {})}, headers=headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def data_of(
    client: TestClient,
    query: str,
    variables: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``data`` of an operation that must succeed."""
    body = gql(client, query, variables, headers)
    assert "errors" not in body, body["errors"]
    data: dict[str, Any] = body["data"]
    return data


def codes_of(body: Mapping[str, Any]) -> list[str]:
    """The ``extensions.code`` of each error, in order."""
    return [error["extensions"]["code"] for error in body.get("errors") or []]


def tenant_wide_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    """A tenant-wide dashboard key of ``world``'s tenant: no X-Department-Id needed."""
    issued = admin.issue_key(database, world.tenant.id, None, "dashboard")
    return {"X-Api-Key": issued.api_key}


def only_error(body: Mapping[str, Any]) -> dict[str, Any]:
    """The one error of an operation that was refused whole, and so returned no data."""
    assert body["data"] is None, body
    (error,) = body["errors"]
    found: dict[str, Any] = error
    return found


def field_errors(errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each of ``errors`` (an error's ``extensions.errors``, a failure's ``errors``) as its field
    and its code."""
    return [(item["field"], item["code"]) for item in errors]


def _field_of(record: str) -> str:
    return record[0].lower() + record[1:]


def upsert_mutation(record: str, input_type: str, selection: str) -> str:
    """The document of ``upsert<record>`` (``$externalId``, ``$input``, and ``$d``, the
    department a tenant-wide key names): its outcome and the record's ``selection``."""
    return f"""
mutation ($externalId: String!, $input: {input_type}!, $d: UUID) {{
  upsert{record}(externalId: $externalId, input: $input, departmentId: $d) {{
    outcome
    {_field_of(record)} {{ {selection} }}
  }}
}}
"""


def batch_mutation(record: str, plural: str, selection: str) -> str:
    """The document of ``batch<plural>`` (``$operations``, ``$atomic``, ``$d``): each result's
    outcome, the record's ``selection`` and the error, and the summary."""
    return f"""
mutation ($operations: [{record}OperationInput!]!, $atomic: Boolean! = false, $d: UUID) {{
  batch{plural}(operations: $operations, atomic: $atomic, departmentId: $d) {{
    results {{
      index outcome
      {_field_of(record)} {{ {selection} }}
      error {{ code message errors {{ field code message }} }}
    }}
    summary {{ created updated unchanged failed }}
  }}
}}
"""


def external_ids(client: TestClient, world: TenantWorld, plural: str) -> list[str | None]:
    """The external ids of the department's ``plural`` (its REST path), as REST lists them,
    oldest first."""
    response = client.get(
        f"/api/v1/integration/{plural}", params={"limit": 100}, headers=world.key.headers
    )
    return [record["external_id"] for record in response.json()["data"]]


@dataclass(frozen=True)
class SyncMutations:
    """A synced record's ``upsert<record>`` and ``batch<plural>`` as the tests send them: each
    answer selects the record's id, external id, department, version, its required text field
    ``label`` and its ``fields``; ``label`` is ``"L"`` unless a test gives it; a batch operation
    holds its data under ``data``, or (deals) under ``create`` or ``upsert`` as its ``op``."""

    record: str
    input_type: str
    label: str
    fields: str
    irregular_plural: str | None = None  # else the record's name and an s
    data_under_op: bool = False

    @property
    def plural(self) -> str:
        """As in ``batch<plural>``."""
        return self.irregular_plural or f"{self.record}s"

    @property
    def field(self) -> str:
        """The record's field in each answer (``customer``)."""
        return _field_of(self.record)

    @property
    def selection(self) -> str:
        return f"id externalId departmentId version {self.label} {self.fields}"

    @property
    def upsert_document(self) -> str:
        return upsert_mutation(self.record, self.input_type, self.selection)

    @property
    def batch_document(self) -> str:
        return batch_mutation(self.record, self.plural, self.selection)

    def upsert(
        self, client: TestClient, headers: Mapping[str, str], external_id: str, **fields: Any
    ) -> dict[str, Any]:
        """The answer of an upsert that must succeed: its outcome and the record."""
        variables = {"externalId": external_id, "input": {self.label: "L", **fields}}
        found: dict[str, Any] = data_of(client, self.upsert_document, variables, headers)[
            f"upsert{self.record}"
        ]
        return found

    def batch(
        self,
        client: TestClient,
        headers: Mapping[str, str],
        operations: list[dict[str, Any]],
        **variables: Any,
    ) -> dict[str, Any]:
        """The JSON body of a batch (``variables``: ``atomic``, ``d``)."""
        return gql(client, self.batch_document, {"operations": operations, **variables}, headers)

    def data_key(self, op: str) -> str:
        """Where an operation ``op`` (UPSERT, CREATE) of a batch holds its data."""
        return op.lower() if self.data_under_op else "data"

    def upsert_operation(self, external_id: str, **data: Any) -> dict[str, Any]:
        key = self.data_key("UPSERT")
        return {"op": "UPSERT", "externalId": external_id, key: {self.label: "L", **data}}

    def create_operation(self, **data: Any) -> dict[str, Any]:
        return {"op": "CREATE", self.data_key("CREATE"): {self.label: "L", **data}}
