"""Every operation of the REST API, once, against a tenant whose schema is a Citus distributed
schema: each answers as on a single server, directly and through pgbouncer in transaction mode
in front of the coordinator. The walk records the operations it called and must have called
every one the OpenAPI document lists, so a new operation fails here until the cluster has
served it too."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.rest_api.responses import API_PREFIX
from tests.citus.plans import assert_routed_whole, statements_sent
from tests.support import TenantWorld

OPENAPI = Path(__file__).resolve().parents[2] / "openapi.json"
PUBLIC_URL = "https://8.8.8.8/hooks/dealbase"


class Walk:
    """Calls the API as the tenant's department key and remembers each operation it called,
    named as the OpenAPI document names it (method and path template)."""

    def __init__(self, client: TestClient, world: TenantWorld) -> None:
        self.client = client
        self.headers = world.key.headers
        self.called: set[tuple[str, str]] = set()

    def __call__(
        self,
        method: str,
        template: str,
        expected: int,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        **path: object,
    ) -> httpx.Response:
        self.called.add((method, API_PREFIX + template))
        response: httpx.Response = self.client.request(
            method,
            API_PREFIX + template.format(**path),
            json=body,
            params=params,
            headers={**self.headers, **(headers or {})},
        )
        assert response.status_code == expected, (method, template, response.text)
        return response


def _documented_operations() -> set[tuple[str, str]]:
    document = json.loads(OPENAPI.read_text())
    return {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in {"get", "post", "put", "patch", "delete"}
    }


def test_every_rest_operation_answers_on_a_distributed_schema_each_statement_routed_whole(
    cluster_client_either_way: TestClient,
    cluster_database: Database,
    cluster_world: TenantWorld,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with statements_sent(monkeypatch) as sent:
        call = Walk(cluster_client_either_way, cluster_world)

        # The department, its steps and employees.
        department = call("GET", "/department", 200).json()
        assert department["id"] == str(cluster_world.department.id)
        steps = call("GET", "/steps", 200).json()["data"]
        assert len(steps) >= 2
        call("GET", "/employees", 200)

        # Customers: create, read, list, patch with If-Match, upsert, batch, delete.
        created = call("POST", "/customers", 201, body={"last_name": "Lovelace", "city": "London"})
        customer = created.json()
        read = call("GET", "/customers/{customer_id}", 200, customer_id=customer["id"])
        assert read.json() == customer
        patched = call(
            "PATCH",
            "/customers/{customer_id}",
            200,
            customer_id=customer["id"],
            body={"city": "Paris"},
            headers={"If-Match": read.headers["etag"]},
        )
        assert patched.json()["city"] == "Paris"
        upserted = call(
            "PUT",
            "/customers/by-external-id/{external_id}",
            201,
            external_id="crm-1",
            body={"last_name": "Hopper"},
        )
        assert upserted.json()["external_id"] == "crm-1"
        call(
            "PUT",
            "/customers/by-external-id/{external_id}",
            200,
            external_id="crm-1",
            body={"last_name": "Hopper"},
        )
        batch = call(
            "POST",
            "/customers/batch",
            200,
            body={
                "operations": [
                    {"op": "create", "data": {"last_name": "Turing"}},
                    {"op": "upsert", "external_id": "crm-2", "data": {"last_name": "Noether"}},
                    {
                        "op": "upsert",
                        "external_id": "crm-1",
                        "data": {"last_name": "Hopper", "city": "NYC"},
                    },
                ]
            },
        ).json()
        assert [result["status"] for result in batch["results"]] == [201, 201, 200], batch
        listed = call("GET", "/customers", 200, params={"limit": "2"}).json()
        assert len(listed["data"]) == 2 and listed["next_cursor"]
        rest = call("GET", "/customers", 200, params={"cursor": listed["next_cursor"]}).json()
        assert len(listed["data"]) + len(rest["data"]) == 4
        idempotent = {"Idempotency-Key": str(uuid.uuid4())}
        first = call("POST", "/customers", 201, body={"last_name": "Once"}, headers=idempotent)
        again = call("POST", "/customers", 201, body={"last_name": "Once"}, headers=idempotent)
        assert again.json() == first.json()
        call("DELETE", "/customers/{customer_id}", 204, customer_id=first.json()["id"])
        call("GET", "/customers/{customer_id}", 404, customer_id=first.json()["id"])

        # Deals: with new customers, links, moves, upsert, batch.
        deal = call(
            "POST",
            "/deals",
            201,
            body={
                "name": "Big",
                "volume": 1200,
                "customers": [{"last_name": "A"}, {"last_name": "B"}],
            },
        ).json()
        assert len(deal["customers"]) == 2
        call("GET", "/deals/{deal_id}", 200, deal_id=deal["id"])
        linked = call(
            "POST",
            "/deals/{deal_id}/customers",
            200,
            deal_id=deal["id"],
            body={"customer_id": customer["id"]},
        ).json()
        assert customer["id"] in {each["id"] for each in linked["customers"]}
        call(
            "DELETE",
            "/deals/{deal_id}/customers/{customer_id}",
            204,
            deal_id=deal["id"],
            customer_id=customer["id"],
        )
        moved = call(
            "PATCH",
            "/deals/{deal_id}",
            200,
            deal_id=deal["id"],
            body={"step_id": steps[1]["id"], "volume": 99},
        ).json()
        assert (moved["step_id"], moved["volume"]) == (steps[1]["id"], 99)
        call(
            "PUT",
            "/deals/by-external-id/{external_id}",
            201,
            external_id="deal-1",
            body={"name": "Upserted"},
        )
        deal_batch = call(
            "POST",
            "/deals/batch",
            200,
            body={
                "operations": [
                    {
                        "op": "create",
                        "data": {"name": "Batched", "customers": [{"last_name": "C"}]},
                    },
                    {"op": "upsert", "external_id": "deal-1", "data": {"name": "Renamed"}},
                ]
            },
        ).json()
        assert [result["status"] for result in deal_batch["results"]] == [201, 200], deal_batch
        deals = call("GET", "/deals", 200, params={"step_id": steps[1]["id"]}).json()["data"]
        assert [each["id"] for each in deals] == [deal["id"]]

        # Activities.
        activity = call(
            "POST",
            "/activities",
            201,
            body={"type": "call", "customer_id": customer["id"], "deal_id": deal["id"]},
        ).json()
        call("GET", "/activities/{activity_id}", 200, activity_id=activity["id"])
        call(
            "PATCH",
            "/activities/{activity_id}",
            200,
            activity_id=activity["id"],
            body={"subject": "Follow up"},
        )
        call(
            "PUT",
            "/activities/by-external-id/{external_id}",
            201,
            external_id="act-1",
            body={"type": "email", "customer_id": customer["id"]},
        )
        activity_batch = call(
            "POST",
            "/activities/batch",
            200,
            body={
                "operations": [
                    {"op": "create", "data": {"type": "note", "customer_id": customer["id"]}},
                    {
                        "op": "upsert",
                        "external_id": "act-1",
                        "data": {"type": "email", "customer_id": customer["id"], "subject": "Re"},
                    },
                ]
            },
        ).json()
        assert [result["status"] for result in activity_batch["results"]] == [201, 200]
        listed_activities = call("GET", "/activities", 200, params={"customer_id": customer["id"]})
        assert len(listed_activities.json()["data"]) == 3
        call("DELETE", "/activities/{activity_id}", 204, activity_id=activity["id"])
        call("DELETE", "/deals/{deal_id}", 204, deal_id=deal["id"])

        # Webhook endpoints and their deliveries (delivery itself: test_webhooks.py).
        endpoint = call("POST", "/webhooks", 201, body={"url": PUBLIC_URL, "events": ["*"]}).json()
        call("GET", "/webhooks", 200)
        call("GET", "/webhooks/{webhook_id}", 200, webhook_id=endpoint["id"])
        call(
            "PATCH",
            "/webhooks/{webhook_id}",
            200,
            webhook_id=endpoint["id"],
            body={"description": "crm"},
        )
        rotated = call(
            "POST", "/webhooks/{webhook_id}/rotate-secret", 200, webhook_id=endpoint["id"]
        ).json()
        assert rotated["secret"] != endpoint["secret"]
        test_delivery = call(
            "POST", "/webhooks/{webhook_id}/test", 202, webhook_id=endpoint["id"]
        ).json()
        deliveries = call(
            "GET", "/webhooks/{webhook_id}/deliveries", 200, webhook_id=endpoint["id"]
        ).json()
        assert test_delivery["id"] in {each["id"] for each in deliveries["data"]}
        call(
            "POST",
            "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
            202,
            webhook_id=endpoint["id"],
            delivery_id=test_delivery["id"],
        )
        call("DELETE", "/webhooks/{webhook_id}", 204, webhook_id=endpoint["id"])

        # Custom fields, by a tenant-wide key (their columns' DDL: test_custom_fields.py).
        issued = admin.issue_key(cluster_database, cluster_world.tenant.id, None, "fields")
        tenant_wide = {"X-Api-Key": issued.api_key}
        field = call(
            "POST",
            "/custom-fields",
            201,
            body={"record": "deal", "name": "tier", "label": "Tier", "type": "text"},
            headers=tenant_wide,
        ).json()
        call("GET", "/custom-fields", 200)
        call("GET", "/custom-fields/{field_id}", 200, field_id=field["id"])
        # The tenant's own document types the deal's new field.
        document = call("GET", "/openapi.json", 200).json()
        deal_out = document["components"]["schemas"]["DealOut"]["properties"]
        assert list(deal_out["custom_fields"]["properties"]) == ["tier"]
        call(
            "PATCH",
            "/custom-fields/{field_id}",
            200,
            field_id=field["id"],
            body={"archived": True, "filterable": True},
            headers=tenant_wide,
        )
        call("DELETE", "/custom-fields/{field_id}", 204, field_id=field["id"], headers=tenant_wide)

        # The events feed: every change above, in order, page after page.
        seen: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = {"limit": "10", **({"after": cursor} if cursor else {})}
            page = call("GET", "/events", 200, params=params).json()
            seen += page["data"]
            cursor = page.get("next_cursor")
            if not page["data"] or not cursor:
                break
        types = [event["type"] for event in seen]
        assert types[:2] == ["customer.created", "customer.updated"], types
        assert "deal.deleted" in types and len({event["id"] for event in seen}) == len(seen)

    assert call.called == _documented_operations()
    assert_routed_whole(citus_url, sent)
