"""A tenant's custom fields on GraphQL: each record's values as typed JSON (``customFields``,
``custom_fields_field``), and the fields' definitions (``customFieldDefinitions``), which tell a
dashboard what each value is.

One schema serves every tenant (docs/graphql.md, "Custom fields", says why): a record's values
are a JSON object of the caller's tenant's fields, shown as its REST JSON shows them, by the
record fitted to that tenant (``SyncedRecord.fitted``): its shape's ``custom_fields``, the same
rendering REST's and the events' read models use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import SimpleNamespace
from typing import Any

import strawberry
from strawberry.scalars import JSON

from dealbase.graphql_api import loaders
from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.types import GraphQLInfo, read_type
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.models import CustomField, FieldType, Option
from dealbase.platform.records import SyncedRecord
from dealbase.platform.shapes import CUSTOM_FIELDS, Shape


@dataclass(frozen=True)
class _Fitted:
    """A record fitted to the caller's tenant, as its ``customFields`` show: its shape of
    ``custom_fields`` alone (None: the tenant has no field of the record)."""

    shape: Shape | None

    def shown(self, values: Mapping[str, Any]) -> JSON:
        """The custom values (by field name, as the read model holds them) as JSON shows
        them."""
        assert self.shape is not None
        shown: JSON = self.shape.as_json(SimpleNamespace(custom_fields=values))[CUSTOM_FIELDS]
        return shown


def _fitted_of(record: SyncedRecord[Any, Any, Any]) -> _Fitted:
    custom = record.custom
    if custom is None or not custom.fields:
        return _Fitted(None)
    shown = tuple(each for each in record.shape.fields if each.name == CUSTOM_FIELDS)
    return _Fitted(Shape(record.shape.table, shown))


def _fitting(
    context: GraphQLContext, record: SyncedRecord[Any, Any, Any]
) -> asyncio.Future[_Fitted]:
    """The record fitted to the caller's tenant: once a request (or a subscription's result),
    whichever of its records asks first. Kept with the request's loaders, which are cleared
    with them."""
    key = (f"fitted_{record.noun}", 0)
    found: asyncio.Future[_Fitted] | None = context.loaders.get(key)
    if found is None:
        found = context.loaders[key] = asyncio.ensure_future(
            context.run(lambda uow: _fitted_of(record.fitted(uow)))
        )
    return found


async def _shown_later(
    context: GraphQLContext,
    record: SyncedRecord[Any, Any, Any],
    fitting: asyncio.Future[_Fitted],
    parent: Any,
) -> JSON | None:
    fitted = await fitting
    if fitted.shape is None:
        return None
    values = getattr(parent, CUSTOM_FIELDS, None)
    if values is None:
        # A record of a nested list, read with its record's own columns only.
        values = await loaders.custom_values(context, record, parent.id)
    return fitted.shown(values or {})


def custom_fields_field(record: SyncedRecord[Any, Any, Any]) -> Any:
    """The ``customFields`` field of ``record``'s type."""
    noun = record.noun

    # Answered now where the request's fitted record is known and the record has its values:
    # graphql-core then has no awaitable to gather.
    def custom_fields(
        parent: strawberry.Parent[Any], info: GraphQLInfo
    ) -> JSON | Awaitable[JSON | None] | None:
        fitting = _fitting(info.context, record)
        values = getattr(parent, CUSTOM_FIELDS, None)
        if fitting.done():
            fitted = fitting.result()
            if fitted.shape is None:
                return None
            if values is not None:
                return fitted.shown(values)
        return _shown_later(info.context, record, fitting, parent)

    return strawberry.field(
        resolver=custom_fields,
        graphql_type=JSON | None,
        description=f"The tenant's custom fields of the {noun}, by name (customFieldDefinitions"
        " describes them), as REST's custom_fields shows them: a decimal as a string, a date"
        " YYYY-MM-DD, a timestamp in UTC with six fractional digits and Z, a select's option"
        " by its id, a multi-select's as an array of ids; null where it has no value. Null"
        f" when the tenant defines no {noun} field.",
    )


@strawberry.enum(description="The kind of record a custom field belongs to.")
class CustomFieldRecord(Enum):
    CUSTOMER = "customer"
    DEAL = "deal"
    ACTIVITY = "activity"


# The platform's types, each by its name.
_TYPES: Any = Enum("CustomFieldType", {kind.name: kind.value for kind in FieldType})  # type: ignore[misc]
CustomFieldType = strawberry.enum(
    _TYPES, description="A custom field's type: what its values are (customFields)."
)


@read_type(Option, description="A select's option: records hold its id, which never changes.")
class CustomFieldOption:
    archived = strawberry.field(
        description="An archived option is no longer given, but records may still hold it."
    )


@read_type(
    CustomField,
    description="A custom field of the tenant's records: their customFields hold its value by"
    " its name. Defined, changed and deleted through the REST API's /custom-fields, with a"
    " tenant-wide key.",
)
class CustomFieldDefinition:
    record = strawberry.field(graphql_type=CustomFieldRecord)
    type = strawberry.field(graphql_type=CustomFieldType)
    max_length = strawberry.field(description="A text field's most characters.")
    options = strawberry.field(
        graphql_type=list[CustomFieldOption] | None,
        description="A select's options, archived ones included; null for other types.",
    )
    unique = strawberry.field(description="Its values are unique in a department.")
    filterable = strawberry.field(description="Indexed for the lists' filters.")
    archived = strawberry.field(
        description="Archived: records no longer show it in customFields, nor take it."
    )


@strawberry.type
class CustomFieldQuery:
    @strawberry.field(
        graphql_type=list[CustomFieldDefinition],
        description="The tenant's custom fields (of one kind of record, when record is given),"
        " oldest first, archived ones included: what each record's customFields holds.",
    )
    async def custom_field_definitions(
        self, info: GraphQLInfo, record: CustomFieldRecord | None = None
    ) -> list[CustomField]:
        kind: Any = None if record is None else record.value
        return await info.context.run(lambda uow: service.list_fields(uow, kind))
