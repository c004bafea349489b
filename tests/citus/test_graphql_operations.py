"""Every root field of the GraphQL schema, once, against a tenant whose schema is a Citus
distributed schema: queries (compiled to one statement or resolved) and mutations answer as on
a single server, directly and through pgbouncer in transaction mode in front of the
coordinator. The walk records the root fields it asked for and must have asked for every one
the schema has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import graphql
import pytest
from fastapi.testclient import TestClient

import dealbase.graphql_api
from tests.citus.plans import assert_routed_whole, statements_sent
from tests.support import TenantWorld

SDL = Path(dealbase.graphql_api.__file__).with_name("schema.graphql")
PUBLIC_URL = "https://8.8.8.8/hooks/dealbase"
CUSTOMER = "id lastName city externalId"
DEAL = "id name volume step { id name } employee { id } customers { id lastName }"
ACTIVITY = "id type subject customer { id } deal { id }"


class Walk:
    """Sends GraphQL documents as the tenant's department key; remembers each root field."""

    def __init__(self, client: TestClient, world: TenantWorld) -> None:
        self.client = client
        self.headers = world.key.headers
        self.asked: set[tuple[str, str]] = set()

    def __call__(self, document: str, **variables: Any) -> dict[str, Any]:
        for definition in graphql.parse(document).definitions:
            assert isinstance(definition, graphql.OperationDefinitionNode)
            kind = definition.operation.value.capitalize()
            for selection in definition.selection_set.selections:
                assert isinstance(selection, graphql.FieldNode)
                self.asked.add((kind, selection.name.value))
        response = self.client.post(
            "/graphql", json={"query": document, "variables": variables}, headers=self.headers
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        assert "errors" not in answer, (document, answer)
        data: dict[str, Any] = answer["data"]
        return data


def _root_fields() -> set[tuple[str, str]]:
    schema = graphql.build_schema(SDL.read_text())
    return {
        (root.name, name)
        for root in (schema.query_type, schema.mutation_type)
        if root is not None
        for name in root.fields
    }


def test_every_graphql_root_field_answers_on_a_distributed_schema_each_statement_routed_whole(
    cluster_client_either_way: TestClient,
    cluster_world: TenantWorld,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with statements_sent(monkeypatch) as statements:
        ask = Walk(cluster_client_either_way, cluster_world)

        departments = ask("{ departments { id name } }")["departments"]
        assert [each["id"] for each in departments] == [str(cluster_world.department.id)]
        steps = ask("{ steps { id name position } }")["steps"]
        ask("{ employees(first: 5) { totalCount edges { node { id } } } }")
        assert ask("{ customFieldDefinitions(record: CUSTOMER) { name } }") == {
            "customFieldDefinitions": []
        }

        customer = ask(
            f"mutation($input: CustomerInput!) {{ createCustomer(input: $input) {{ {CUSTOMER} }} }}",
            input={"lastName": "Lovelace", "city": "London"},
        )["createCustomer"]
        updated = ask(
            f'mutation($id: UUID!) {{ updateCustomer(id: $id, changes: {{city: "Paris"}}) '
            f"{{ {CUSTOMER} }} }}",
            id=customer["id"],
        )["updateCustomer"]
        assert updated["city"] == "Paris"
        upserted = ask(
            f'mutation {{ upsertCustomer(externalId: "crm-1", input: {{lastName: "Hopper"}}) '
            f"{{ outcome customer {{ {CUSTOMER} }} }} }}"
        )["upsertCustomer"]
        assert upserted["outcome"] == "CREATED"
        batch = ask(
            "mutation { batchCustomers(operations: ["
            '{op: CREATE, data: {lastName: "Turing"}},'
            '{op: UPSERT, externalId: "crm-1", data: {lastName: "Hopper", city: "NYC"}}'
            "]) { summary { created updated failed } } }"
        )["batchCustomers"]
        assert batch["summary"] == {"created": 1, "updated": 1, "failed": 0}
        assert (
            ask(f'{{ customer(id: "{customer["id"]}") {{ {CUSTOMER} }} }}')["customer"] == updated
        )
        listed = ask(
            f"{{ customers(first: 10) {{ totalCount edges {{ node {{ {CUSTOMER} }} }} }} }}"
        )
        assert listed["customers"]["totalCount"] == 3

        deal = ask(
            f"mutation($input: DealInput!) {{ createDeal(input: $input) {{ {DEAL} }} }}",
            input={"name": "Big", "volume": 1200, "customers": [{"lastName": "A"}]},
        )["createDeal"]
        assert len(deal["customers"]) == 1
        ask(
            f"mutation($d: UUID!, $c: UUID!) {{ linkCustomer(dealId: $d, customerId: $c) {{ {DEAL} }} }}",
            d=deal["id"],
            c=customer["id"],
        )
        ask(
            f"mutation($d: UUID!, $c: UUID!) {{ unlinkCustomer(dealId: $d, customerId: $c) "
            f"{{ {DEAL} }} }}",
            d=deal["id"],
            c=customer["id"],
        )
        moved = ask(
            f"mutation($id: UUID!, $step: UUID!) {{ moveDeal(id: $id, stepId: $step) {{ {DEAL} }} }}",
            id=deal["id"],
            step=steps[1]["id"],
        )["moveDeal"]
        assert moved["step"]["id"] == steps[1]["id"]
        ask(
            f"mutation($id: UUID!) {{ assignDeal(id: $id, employeeId: null) {{ {DEAL} }} }}",
            id=deal["id"],
        )
        ask(
            f'mutation($id: UUID!) {{ updateDeal(id: $id, changes: {{name: "Bigger"}}) {{ {DEAL} }} }}',
            id=deal["id"],
        )
        ask(
            f'mutation {{ upsertDeal(externalId: "deal-1", input: {{name: "Upserted"}}) '
            f"{{ outcome deal {{ {DEAL} }} }} }}"
        )
        deal_batch = ask(
            "mutation { batchDeals(operations: ["
            '{op: CREATE, create: {name: "Batched"}},'
            '{op: UPSERT, externalId: "deal-1", upsert: {name: "Renamed"}}'
            "]) { summary { created updated failed } } }"
        )["batchDeals"]
        assert deal_batch["summary"] == {"created": 1, "updated": 1, "failed": 0}
        assert ask(f'{{ deal(id: "{deal["id"]}") {{ {DEAL} }} }}')["deal"]["name"] == "Bigger"
        deals = ask(
            f"{{ deals(first: 2, orderBy: CREATED_ASC) {{ totalCount pageInfo {{ hasNextPage endCursor }}"
            f" edges {{ cursor node {{ {DEAL} }} }} }} }}"
        )["deals"]
        assert deals["totalCount"] == 3 and deals["pageInfo"]["hasNextPage"]
        rest = ask(
            "query($after: String) { deals(first: 5, after: $after) { edges { node { id } } } }",
            after=deals["pageInfo"]["endCursor"],
        )["deals"]
        assert len(rest["edges"]) == 1
        board = ask("{ pipeline { steps { step { id } dealCount totalVolume } } }")["pipeline"]
        assert sum(column["dealCount"] for column in board["steps"]) == 3
        ask(
            '{ pipelineSummary(createdFrom: "2000-01-01T00:00:00Z", createdTo: "2100-01-01T00:00:00Z")'
            " { dealCount volume } }"
        )

        activity = ask(
            f"mutation($input: ActivityInput!) {{ createActivity(input: $input) {{ {ACTIVITY} }} }}",
            input={"type": "CALL", "customerId": customer["id"], "dealId": deal["id"]},
        )["createActivity"]
        ask(
            f'mutation($id: UUID!) {{ updateActivity(id: $id, changes: {{subject: "Re"}}) '
            f"{{ {ACTIVITY} }} }}",
            id=activity["id"],
        )
        ask(
            f'mutation($input: ActivityInput!) {{ upsertActivity(externalId: "act-1", input: $input)'
            f" {{ outcome activity {{ {ACTIVITY} }} }} }}",
            input={"type": "EMAIL", "customerId": customer["id"]},
        )
        ask(
            "mutation($c: UUID!) { batchActivities(operations: [{op: CREATE, data: "
            "{type: NOTE, customerId: $c}}]) { summary { created } } }",
            c=customer["id"],
        )
        assert ask(f'{{ activity(id: "{activity["id"]}") {{ {ACTIVITY} }} }}')["activity"]
        activities = ask("{ activities(first: 10) { totalCount } }")["activities"]
        assert activities["totalCount"] == 3

        issued = ask(
            "mutation($input: WebhookEndpointInput!) { createWebhookEndpoint(input: $input)"
            " { secret endpoint { id } } }",
            input={"url": PUBLIC_URL, "events": ["*"]},
        )["createWebhookEndpoint"]
        endpoint_id = issued["endpoint"]["id"]
        ask(
            'mutation($id: UUID!) { updateWebhookEndpoint(id: $id, changes: {description: "crm"})'
            " { id description } }",
            id=endpoint_id,
        )
        rotated = ask(
            "mutation($id: UUID!) { rotateWebhookSecret(id: $id) { secret } }", id=endpoint_id
        )["rotateWebhookSecret"]
        assert rotated["secret"] != issued["secret"]
        sent = ask(
            "mutation($id: UUID!) { sendTestWebhook(endpointId: $id) { id } }", id=endpoint_id
        )["sendTestWebhook"]
        ask(
            "mutation($e: UUID!, $d: UUID!) { redeliverWebhookDelivery(endpointId: $e, deliveryId: $d)"
            " { id } }",
            e=endpoint_id,
            d=sent["id"],
        )
        assert ask(f'{{ webhookEndpoint(id: "{endpoint_id}") {{ id description }} }}')
        assert (
            ask("{ webhookEndpoints(first: 5) { totalCount } }")["webhookEndpoints"]["totalCount"]
            == 1
        )
        deliveries = ask(
            f'{{ webhookDeliveries(endpointId: "{endpoint_id}", first: 5) {{ edges {{ node {{ id }} }} }} }}'
        )["webhookDeliveries"]
        assert sent["id"] in {edge["node"]["id"] for edge in deliveries["edges"]}
        ask("mutation($id: UUID!) { deleteWebhookEndpoint(id: $id) }", id=endpoint_id)

        ask("mutation($id: UUID!) { deleteActivity(id: $id) }", id=activity["id"])
        ask("mutation($id: UUID!) { deleteDeal(id: $id) }", id=deal["id"])
        ask("mutation($id: UUID!) { deleteCustomer(id: $id) }", id=customer["id"])
        assert ask("{ customers(first: 1) { totalCount } }")["customers"]["totalCount"] == 3

    assert ask.asked == _root_fields()
    assert_routed_whole(citus_url, statements)
