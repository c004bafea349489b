"""Every field of the platform's customer, deal and activity models reaches both APIs: a field
added to a platform model but missing from a REST wire model or request body, a GraphQL type or a
GraphQL input fails here. The deliberate exceptions are listed below, each with its reason."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import TYPE_CHECKING, Any, get_args

import graphql
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel
from strawberry.schema.config import StrawberryConfig
from strawberry.types.base import get_object_definition
from strawberry.utils.str_converters import to_camel_case

from dealbase.config import Settings
from dealbase.graphql_api import activities, customers, deals, inputs, types
from dealbase.graphql_api.schema import build_schema
from dealbase.platform.activities.models import (
    Activity,
    ActivityFields,
    ActivityPatch,
    ActivityType,
)
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerPatch
from dealbase.platform.deals.models import Deal, DealChanges, DealCreate, DealPatch, DealUpsert
from dealbase.rest_api.responses import API_PREFIX
from dealbase.rest_api.schemas import ActivityOut, CustomerOut, DealOut

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SENT_AS_ETAG = "sent as the ETag header, not in the body"

# The platform attributes a REST response leaves out, with the reason. The GraphQL types leave
# out none: a dashboard key may span departments, and GraphQL has no ETag to carry the version.
NOT_IN_REST_RESPONSES: dict[type[DataclassInstance], dict[str, str]] = {
    Customer: {
        "department_id": "a REST key is bound to one department, and the integration"
        " document's customer shows none",
        "version": SENT_AS_ETAG,
    },
    Deal: {"version": SENT_AS_ETAG},
    Activity: {
        "department_id": "as for the customer it is about: a REST key is bound to one department",
        "version": SENT_AS_ETAG,
    },
}
# Not an attribute of a read model: a record fitted to its tenant's custom fields
# (platform/custom_fields/fitting.py) reads them back under this name, in REST and events.
CUSTOM_FIELDS = {"custom_fields"}
GRAPHQL_TYPES = [
    pytest.param(Customer, customers.Customer, id="Customer"),
    pytest.param(Deal, deals.Deal, id="Deal"),
    pytest.param(Activity, activities.Activity, id="Activity"),
]


def field_names(model: type[BaseModel] | type[DataclassInstance]) -> set[str]:
    if issubclass(model, BaseModel):
        return set(model.model_fields)
    return {field.name for field in dataclasses.fields(model)}


def camel(names: set[str]) -> set[str]:
    """The names as GraphQL shows them, by the converter the schema itself uses."""
    return {to_camel_case(name) for name in names}


@cache
def graphql_schema() -> graphql.GraphQLSchema:
    return graphql.build_schema(build_schema(Settings(database_url=None)).as_str())


@pytest.mark.parametrize(
    ("settable", "read_model"),
    [
        (CustomerFields, Customer),
        (DealCreate, Deal),
        (DealChanges, Deal),
        (DealUpsert, Deal),
        (ActivityFields, Activity),
    ],
)
def test_every_settable_field_is_read_back(
    settable: type[BaseModel], read_model: type[DataclassInstance]
) -> None:
    assert field_names(settable) - field_names(read_model) - CUSTOM_FIELDS == set()


@pytest.mark.parametrize(
    ("read_model", "wire_model"),
    [(Customer, CustomerOut), (Deal, DealOut), (Activity, ActivityOut)],
)
def test_rest_responses_show_every_field_but_the_listed_ones(
    read_model: type[DataclassInstance], wire_model: type[BaseModel]
) -> None:
    hidden = set(NOT_IN_REST_RESPONSES[read_model])

    assert field_names(wire_model) == field_names(read_model) - hidden | CUSTOM_FIELDS


@pytest.mark.parametrize(
    ("method", "path", "platform_model"),
    [
        ("post", "/customers", CustomerFields),
        ("patch", "/customers/{customer_id}", CustomerPatch),
        ("post", "/deals", DealCreate),
        ("patch", "/deals/{deal_id}", DealPatch),
        ("put", "/deals/by-external-id/{external_id}", DealUpsert),
        ("post", "/activities", ActivityFields),
        ("patch", "/activities/{activity_id}", ActivityPatch),
        ("put", "/activities/by-external-id/{external_id}", ActivityFields),
    ],
)
def test_rest_request_bodies_take_every_field(
    client: TestClient, method: str, path: str, platform_model: type[BaseModel]
) -> None:
    document: dict[str, Any] = client.get("/openapi.json").json()
    operation = document["paths"][API_PREFIX + path][method]
    reference = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = document["components"]["schemas"][reference.rsplit("/", 1)[-1]]

    assert set(body["properties"]) == field_names(platform_model)


def shown_attributes(graphql_type: type) -> set[str]:
    """The attributes the printed schema's type shows, by the names its fields read them
    (webhookEndpointId reads endpoint_id)."""
    definition = get_object_definition(graphql_type, strict=True)
    shown = graphql_schema().type_map[definition.name]
    assert isinstance(shown, graphql.GraphQLObjectType)
    names = StrawberryConfig().name_converter
    return {
        field.python_name
        for field in definition.fields
        if names.get_graphql_name(field) in shown.fields
    }


@pytest.mark.parametrize(("read_model", "graphql_type"), GRAPHQL_TYPES)
def test_graphql_types_show_every_field(
    read_model: type[DataclassInstance], graphql_type: type
) -> None:
    """The types are made of their read models (``types.read_type``): this fails when one
    leaves out or hides an attribute."""
    assert field_names(read_model) - shown_attributes(graphql_type) == set()


@pytest.mark.parametrize(("read_model", "graphql_type"), GRAPHQL_TYPES)
def test_graphql_types_read_platform_attributes_without_resolvers(
    read_model: type[DataclassInstance], graphql_type: type
) -> None:
    """A dashboard read resolves about 1,500 fields: an attribute is read as it is, not through
    a Python resolver called per field."""
    fields = get_object_definition(graphql_type, strict=True).fields

    resolved = {field.python_name for field in fields if field.base_resolver is not None}

    assert resolved & field_names(read_model) == set()


@pytest.mark.parametrize(
    ("graphql_input", "platform_model"),
    [
        (inputs.CustomerInput, CustomerFields),
        (inputs.CustomerChanges, CustomerPatch),
        (inputs.DealInput, DealCreate),
        (inputs.DealChanges, DealPatch),
        (inputs.DealUpsertInput, DealUpsert),
        (inputs.ActivityInput, ActivityFields),
        (inputs.ActivityChanges, ActivityPatch),
    ],
)
def test_graphql_inputs_take_every_field(
    graphql_input: type, platform_model: type[BaseModel]
) -> None:
    taken = graphql_schema().type_map[graphql_input.__name__]
    assert isinstance(taken, graphql.GraphQLInputObjectType)

    # Equal, not only a superset: the platform models refuse a field they do not know.
    assert set(taken.fields) == camel(field_names(platform_model))


def test_graphql_activity_types_are_the_platforms() -> None:
    assert [member.value for member in types.ActivityType] == list(get_args(ActivityType))
