"""The wire models' documented examples are responses the models themselves accept, and the
models describe the responses the platform shapes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from dealbase.rest_api.schemas import (
    ActivityOut,
    CustomerOut,
    DealOut,
    OperationProblem,
    WebhookDeliveryOut,
)
from tests.support import TenantWorld

API = "/api/v1/integration"


@pytest.mark.parametrize(
    "model", [CustomerOut, DealOut, ActivityOut, OperationProblem, WebhookDeliveryOut]
)
def test_documented_examples_validate_against_their_model(model: type[BaseModel]) -> None:
    examples = model.model_json_schema(mode="serialization")["examples"]

    assert examples
    for example in examples:
        assert model.model_validate(example).model_dump(mode="json") == example


def test_wire_models_describe_the_platform_shape_field_for_field(
    client: TestClient, world: TenantWorld
) -> None:
    headers = world.key.headers
    deal = client.post(
        f"{API}/deals",
        json={"name": "Engine", "customers": [{"last_name": "Ada"}]},
        headers=headers,
    ).json()
    customer = deal["customers"][0]
    activity = client.post(
        f"{API}/activities", json={"type": "call", "customer_id": customer["id"]}, headers=headers
    ).json()

    for model, body in ((DealOut, deal), (CustomerOut, customer), (ActivityOut, activity)):
        # Without custom fields of the tenant's, a record shows none (the tenant's own fields:
        # tests/rest_api/test_custom_field_values.py).
        assert list(model.model_fields) == [*body, "custom_fields"], model.__name__
        assert model.model_validate(body).model_dump(mode="json", exclude_unset=True) == body, (
            model.__name__
        )
