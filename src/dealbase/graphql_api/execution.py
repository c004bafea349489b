"""Execution of plain leaf fields without graphql-core's per-field machinery.

A dashboard read resolves about 1,500 scalar fields that are attributes of their parent object
(``Customer.lastName``, ``Step.kind``...). graphql-core runs each through the steps of a resolver
that fetches data: a ``Path``, a ``GraphQLResolveInfo``, Strawberry's resolver wrapper, an
awaitability check, ``complete_value``; together 60 % of a dashboard request's CPU time. For a
field Strawberry resolves by reading an attribute, with no arguments, no extension and a scalar or
enum type, the attribute is all the resolver could return, so the field's result is that value
coerced by its type, computed here in one step for all such fields of an object.

Anything else, and any value this step cannot complete (``null`` for a non-null field, a value the
scalar refuses), goes through graphql-core unchanged, which reports it as it always does. The
result keeps the selection's order. tests/graphql_api/test_execution.py runs documents both ways
and compares the responses, errors included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from graphql import (
    GraphQLField,
    GraphQLLeafType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import GroupedFieldSet
from graphql.pyutils import Path
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

# Where a plain leaf field's recipe is kept, in its GraphQLField's extensions.
_PLAIN_LEAF = "dealbase-plain-leaf"
# What a recipe answers when graphql-core must complete the field instead.
_NOT_PLAIN = object()


@dataclass(frozen=True, slots=True)
class _PlainLeaf:
    read: Callable[[Any, str], Any]
    attribute: str
    coerce: Callable[[Any], Any]
    non_null: bool

    def complete(self, source: Any) -> Any:
        """The field's value in the response, or ``_NOT_PLAIN``."""
        try:
            value = self.read(source, self.attribute)
            if value is None:
                return _NOT_PLAIN if self.non_null else None
            coerced = self.coerce(value)
        except Exception:  # graphql-core completes the field again and reports it
            return _NOT_PLAIN
        return _NOT_PLAIN if coerced is None or coerced is Undefined else coerced


def _plain_leaf(field: GraphQLField) -> _PlainLeaf | None:
    definition = field.extensions.get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(definition, StrawberryField) or not definition.is_basic_field:
        return None
    # Strawberry's own resolver for a basic field: it calls the default resolver, as complete()
    # does. A field with any other resolver is not plain.
    if not getattr(field.resolve, "_is_default", False) or field.args:
        return None
    non_null = isinstance(field.type, GraphQLNonNull)
    leaf_type = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
    if not is_leaf_type(leaf_type):
        return None
    assert isinstance(leaf_type, GraphQLLeafType)
    return _PlainLeaf(
        read=definition.default_resolver,
        attribute=definition.python_name,
        coerce=leaf_type.coerce_output_value,
        non_null=non_null,
    )


def mark_plain_leaves(schema: GraphQLSchema) -> None:
    """Records the recipe of every plain leaf field of ``schema``'s object types."""
    for named_type in schema.type_map.values():
        if isinstance(named_type, GraphQLObjectType) and not named_type.name.startswith("__"):
            for field in named_type.fields.values():
                plain = _plain_leaf(field)
                if plain is not None:
                    field.extensions[_PLAIN_LEAF] = plain


def _in_order(
    grouped_field_set: GroupedFieldSet, plain: dict[str, Any], others: dict[str, Any]
) -> dict[str, Any]:
    # graphql-core leaves out a field it could not find (Undefined): so does this.
    return {
        name: plain[name] if name in plain else others[name]
        for name in grouped_field_set
        if name in plain or name in others
    }


class PlainLeavesExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """graphql-core's execution, with the plain leaf fields (``mark_plain_leaves``) of each
    object completed in one step, when no extension wraps resolvers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Strawberry passes a manager on every request; it wraps resolvers only when an extension
        # hooks into resolving, and then every field must go through it.
        self._plain_leaves = not (self.middleware_manager and self.middleware_manager.middlewares)

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> Any:
        if not self._plain_leaves:
            return super().execute_fields(
                parent_type, source_value, path, grouped_field_set, position_context
            )
        get_field = self.schema.get_field
        plain: dict[str, Any] = {}
        others: GroupedFieldSet = {}
        for response_name, field_details_list in grouped_field_set.items():
            field = get_field(parent_type, field_details_list[0].node.name.value)
            recipe: _PlainLeaf | None = None if field is None else field.extensions.get(_PLAIN_LEAF)
            value = _NOT_PLAIN if recipe is None else recipe.complete(source_value)
            if value is _NOT_PLAIN:
                others[response_name] = field_details_list
            else:
                plain[response_name] = value
        if not others:
            return plain
        completed = super().execute_fields(
            parent_type, source_value, path, others, position_context
        )
        if not plain:
            return completed
        if isinstance(completed, dict):
            return _in_order(grouped_field_set, plain, completed)
        return self._merged_later(grouped_field_set, plain, completed)

    @staticmethod
    async def _merged_later(
        grouped_field_set: GroupedFieldSet,
        plain: dict[str, Any],
        completed: Awaitable[dict[str, Any]],
    ) -> dict[str, Any]:
        return _in_order(grouped_field_set, plain, await completed)
