"""Execution of plain leaf fields without graphql-core's per-field machinery.

A dashboard read resolves about 1,500 scalar fields that are attributes of their parent object
(``Customer.lastName``, ``Step.kind``...). graphql-core runs each through the steps of a resolver
that fetches data: a ``Path``, a ``GraphQLResolveInfo``, Strawberry's resolver wrapper, an
awaitability check, ``complete_value``; together the largest part of a dashboard request's CPU
time. For a field Strawberry resolves by reading an attribute, with no arguments, no extension
and a scalar or enum type, the attribute is all the resolver could return, so the field's result
is that value coerced by its type, computed here in one step for all such fields of an object.

Anything else, and any value this step cannot complete (``null`` for a non-null field, a value the
scalar refuses), goes through graphql-core unchanged, which reports it as it always does. The
result keeps the selection's order. tests/graphql_api/test_execution.py runs documents both ways
and compares the responses, errors included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import orjson
import structlog
from graphql import (
    FieldNode,
    GraphQLError,
    GraphQLField,
    GraphQLLeafType,
    GraphQLNonNull,
    GraphQLObjectType,
    Undefined,
    is_leaf_type,
    is_non_null_type,
    located_error,
)
from graphql.execution.collect_fields import GroupedFieldSet
from graphql.pyutils import Path
from strawberry import Schema
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types.field import StrawberryField

from dealbase.graphql_api.compiled import CompiledField, NotCompiled, PreparedRead, compiler_of
from dealbase.graphql_api.context import GraphQLContext

# What a recipe answers when graphql-core must complete the field instead.
_NOT_PLAIN = object()


class FieldDefinitions:
    """Strawberry's definition of each field of one schema, by GraphQL type and field name,
    found through the schema's public lookup (``get_field_for_type``) once each. Made before
    the schema it reads (its execution context class is made with it): ``schema`` is set once
    the schema is built."""

    def __init__(self) -> None:
        self.schema: Schema | None = None
        self._found: dict[tuple[str, str], StrawberryField | None] = {}

    def get(self, type_name: str, field_name: str) -> StrawberryField | None:
        key = (type_name, field_name)
        if key not in self._found:
            if self.schema is None or self.schema.get_type_by_name(type_name) is None:
                return None
            self._found[key] = self.schema.get_field_for_type(field_name, type_name)
        return self._found[key]

    def python_name(self, type_name: str, field_name: str) -> str:
        definition = self.get(type_name, field_name)
        if definition is None:
            raise NotCompiled(f"{type_name}.{field_name} is not a Strawberry field")
        return definition.python_name

    def argument_names(self, type_name: str, field_name: str) -> dict[str, str]:
        """The field's arguments' Python names by their GraphQL names."""
        definition = self.get(type_name, field_name)
        if definition is None or self.schema is None:
            raise NotCompiled(f"{type_name}.{field_name} is not a Strawberry field")
        names = self.schema.config.name_converter
        return {names.get_graphql_name(each): each.python_name for each in definition.arguments}


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


def _plain_leaf(field: GraphQLField, definition: StrawberryField | None) -> _PlainLeaf | None:
    # A basic field (no resolver, no field extension) is one Strawberry resolves by its default
    # resolver alone, as complete() does; no exception handler applies to a leaf (handlers
    # answer a union member).
    if definition is None or not definition.is_basic_field or field.args:
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
    """graphql-core's execution, with the plain leaf fields of each object completed in one
    step, when no extension wraps resolvers. A schema's class is made by ``of`` (Strawberry's
    ``execution_context_class``): without definitions, no field is plain."""

    definitions: ClassVar[FieldDefinitions] = FieldDefinitions()
    # Each object type's plain leaf recipes by field name, found on the type's first use.
    recipes: ClassVar[dict[str, dict[str, _PlainLeaf]]] = {}

    @classmethod
    def of(cls, definitions: FieldDefinitions, **attributes: Any) -> type[Self]:
        """The class of one schema's executions, reading ``definitions``."""
        return type(cls.__name__, (cls,), {"definitions": definitions, "recipes": {}, **attributes})

    def _recipes(self, parent_type: GraphQLObjectType) -> dict[str, _PlainLeaf]:
        found = self.recipes.get(parent_type.name)
        if found is None:
            definitions = self.definitions
            found = {}
            for name, field in parent_type.fields.items():
                recipe = _plain_leaf(field, definitions.get(parent_type.name, name))
                if recipe is not None:
                    found[name] = recipe
            if definitions.schema is not None:
                self.recipes[parent_type.name] = found
        return found

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
        recipes = self._recipes(parent_type)
        plain: dict[str, Any] = {}
        others: GroupedFieldSet = {}
        for response_name, field_details_list in grouped_field_set.items():
            recipe = recipes.get(field_details_list[0].node.name.value)
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


# A root field's path, for the metric and the access line: compiled, or through the resolvers.
COMPILED = "compiled"
RESOLVERS = "resolvers"
# (root field name, path) for each root field of a query run.
RootFieldObserver = Callable[[str, str], None]


def report_root_fields(paths: Mapping[str, str], observe: RootFieldObserver | None) -> None:
    """Tells the metrics and the access line each root field's path."""
    if observe is not None:
        for name, path in paths.items():
            observe(name, path)
    structlog.contextvars.bind_contextvars(graphql_root_fields=dict(paths))


@dataclass(frozen=True, slots=True)
class RootRead:
    """A compiled root field's read with a request's arguments, and where its answer goes: its
    response key, its nodes (an error's locations), whether it may be null."""

    key: str
    read: PreparedRead
    nodes: list[FieldNode]
    non_null: bool


async def run_root_reads(
    reads: Sequence[RootRead], context: GraphQLContext, errors: list[GraphQLError], alone: bool
) -> dict[str, Any] | None:
    """Each read's JSON, in order. A read's error is located at its field as graphql-core
    locates a resolver's (in ``errors``): null in its place, or the whole data null (None, and
    no read after it runs) when the field cannot be null. ``alone``: the request reads nothing
    else (``PreparedRead.run``'s ``last``)."""
    data: dict[str, Any] = {}
    for each in reads:
        try:
            data[each.key] = orjson.Fragment(await each.read.run(context, last=alone))
        except Exception as raised:
            errors.append(located_error(raised, each.nodes, [each.key]))
            if each.non_null:
                return None
            data[each.key] = None
    return data


class CompilingExecutionContext(PlainLeavesExecutionContext):
    """Runs the compiled root fields of a query (``compiled.ReadCompiler``) and the others
    through the resolvers, each field one way. A schema's class is made by ``for_schema``."""

    compiles: ClassVar[bool] = False
    # The root fields' observer, if any (in a tuple: a function here would become a method).
    observers: ClassVar[tuple[RootFieldObserver, ...]] = ()
    # Each root field's path once the query ran: compiled, or through the resolvers.
    root_field_paths: Mapping[str, str] | None = None
    # The reads of the root fields that were compiled, in the response's order.
    root_reads: Sequence[RootRead] = ()

    @classmethod
    def for_schema(
        cls, definitions: FieldDefinitions, compiles: bool, observe: RootFieldObserver | None
    ) -> type[Self]:
        """The class of one schema's executions: compiling its reads or not (the resolvers
        answer every field), telling ``observe`` each root field's path."""
        observers = () if observe is None else (observe,)
        return cls.of(definitions, compiles=compiles, observers=observers)

    def execute_root_grouped_field_set(
        self,
        root_type: GraphQLObjectType,
        root_value: Any,
        grouped_field_set: GroupedFieldSet,
        serially: bool,
        position_context: Any,
    ) -> Any:
        if serially or not self.compiles or root_type is not self.schema.query_type:
            return super().execute_root_grouped_field_set(
                root_type, root_value, grouped_field_set, serially, position_context
            )
        compiler = compiler_of(self.schema, self.definitions)
        compiled: dict[str, CompiledField] = {}
        for key, details in grouped_field_set.items():
            found = compiler.compile(
                [detail.node for detail in details], self.fragment_definitions, self.variable_values
            )
            if found is not None:
                compiled[key] = found
        reads: list[RootRead] = []
        for key, field in compiled.items():
            prepared = compiler.prepare(field, self.variable_values)
            if prepared is not None:
                nodes = [detail.node for detail in grouped_field_set[key]]
                reads.append(RootRead(key, prepared, nodes, is_non_null_type(field.field.type)))
        return self._with_compiled(
            reads, root_type, root_value, grouped_field_set, position_context
        )

    async def _with_compiled(
        self,
        reads: list[RootRead],
        root_type: GraphQLObjectType,
        root_value: Any,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> dict[str, Any]:
        self.root_reads = reads
        compiled = {each.key for each in reads}
        paths = {
            details[0].node.name.value: COMPILED if key in compiled else RESOLVERS
            for key, details in grouped_field_set.items()
        }
        self.root_field_paths = paths
        report_root_fields(paths, self.observers[0] if self.observers else None)
        errors: list[GraphQLError] = []
        alone = len(reads) == 1 and len(grouped_field_set) == 1
        answered = await run_root_reads(reads, self.context_value, errors, alone) if reads else {}
        for error in errors:
            # As graphql-core handles a resolver's error (raised on when the field is non-null).
            key = str(error.path[0]) if error.path else ""
            field_type = root_type.fields[grouped_field_set[key][0].node.name.value].type
            path = Path(None, key, root_type.name)
            self.handle_field_error(error, field_type, grouped_field_set[key], path)
        assert answered is not None
        others = {key: value for key, value in grouped_field_set.items() if key not in answered}
        completed: Any = {}
        if others:
            completed = self.execute_fields(root_type, root_value, None, others, position_context)
            if self.is_awaitable(completed):
                completed = await completed
        return {
            key: answered[key] if key in answered else completed[key]
            for key in grouped_field_set
            if key in answered or key in completed
        }
