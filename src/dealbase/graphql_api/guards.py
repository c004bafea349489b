"""Limits on what one query may ask: its estimated cost, checked before it runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLField,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
    VariableNode,
    get_named_type,
)
from strawberry.extensions import SchemaExtension

from dealbase.platform.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

QUERY_TOO_COSTLY = "query_too_costly"


def estimate_cost(
    schema: GraphQLSchema, document: DocumentNode, variables: Mapping[str, Any] | None
) -> int:
    """Every field costs 1, and the fields below a list count once per item it may hold.

    A field taking ``first`` holds that many (a variable counts at its value, else at the
    maximum; absent, at the argument's default), and a connection's ``edges`` then count once;
    any other list is assumed to hold a default page.
    """
    fragments = {
        definition.name.value: definition
        for definition in document.definitions
        if isinstance(definition, FragmentDefinitionNode)
    }
    given = variables or {}

    def first_of(field: FieldNode, definition: GraphQLField) -> int | None:
        if "first" not in definition.args:
            return None
        for argument in field.arguments or ():
            if argument.name.value != "first":
                continue
            if isinstance(argument.value, IntValueNode):
                return int(argument.value.value)
            if isinstance(argument.value, VariableNode):
                value = given.get(argument.value.name.value)
                return value if isinstance(value, int) else MAX_PAGE_SIZE
        default = definition.args["first"].default_value
        return default if isinstance(default, int) else DEFAULT_PAGE_SIZE

    def repeat_of(field: FieldNode, definition: GraphQLField) -> int:
        first = first_of(field, definition)
        if first is not None:
            return max(first, 1)
        returns = definition.type
        if isinstance(returns, GraphQLNonNull):
            returns = returns.of_type
        if isinstance(returns, GraphQLList):
            return 1 if field.name.value == "edges" else DEFAULT_PAGE_SIZE
        return 1

    def cost_of(
        selection_set: SelectionSetNode | None, parent: GraphQLNamedType, seen: frozenset[str]
    ) -> int:
        if selection_set is None or not isinstance(
            parent, GraphQLObjectType | GraphQLInterfaceType
        ):
            return 0
        total = 0
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                definition = parent.fields.get(selection.name.value)
                if definition is None:  # __typename, or an error validation reports
                    total += 1
                    continue
                children = cost_of(selection.selection_set, get_named_type(definition.type), seen)
                total += 1 + repeat_of(selection, definition) * children
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                on = schema.get_type(condition.name.value) if condition else parent
                total += cost_of(selection.selection_set, on or parent, seen)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in fragments and name not in seen:
                    fragment = fragments[name]
                    on = schema.get_type(fragment.type_condition.name.value) or parent
                    total += cost_of(fragment.selection_set, on, seen | {name})
        return total

    total = 0
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            root = schema.get_root_type(definition.operation)
            if root is not None:
                total += cost_of(definition.selection_set, root, frozenset())
    return total


class QueryCost(SchemaExtension):
    """Refuses a query whose estimated cost is over the budget before it runs, and reports the
    estimate in the response's ``extensions.cost`` either way."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.estimate: int | None = None

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        if context.graphql_document is not None:
            self.estimate = estimate_cost(
                context.schema._schema, context.graphql_document, context.variables
            )
            if self.estimate > self.budget:
                context.validation_rules = (
                    *context.validation_rules,
                    _refusal(self.estimate, self.budget),
                )
        yield

    def get_results(self) -> dict[str, Any]:
        if self.estimate is None:
            return {}
        return {"cost": {"estimated": self.estimate, "budget": self.budget}}


def _refusal(estimate: int, budget: int) -> type[ValidationRule]:
    class CostOverBudget(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)
            context.report_error(
                GraphQLError(
                    f"The query's estimated cost {estimate} is over the budget of {budget};"
                    " ask for fewer items (first) or fewer fields.",
                    extensions={"code": QUERY_TOO_COSTLY},
                )
            )

    return CostOverBudget
