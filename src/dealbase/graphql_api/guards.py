"""Limits on what one query may ask, checked before it runs: its depth, aliases and tokens, and
its estimated cost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    ASTValidationRule,
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
    VariableNode,
    get_named_type,
)
from strawberry.extensions import DisableIntrospection, MaxAliasesLimiter, QueryDepthLimiter

from dealbase.config import Settings
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

QUERY_TOO_COSTLY = "query_too_costly"


@dataclass(frozen=True)
class Guards:
    """The limits of one schema, from the settings: the rules validation adds to GraphQL's own
    (Strawberry's depth and alias limits, and its introspection switch), the tokens parsing
    reads at most, and the budget of the estimated cost."""

    validation_rules: tuple[type[ASTValidationRule], ...]
    max_tokens: int
    max_cost: int

    @classmethod
    def of(cls, settings: Settings) -> Guards:
        # Strawberry's limiters as plain rules, made once: as extensions they would make new
        # rule classes for every request.
        rules = [
            *QueryDepthLimiter(max_depth=settings.graphql_max_depth).validation_rules,
            *MaxAliasesLimiter(max_alias_count=settings.graphql_max_aliases).validation_rules,
        ]
        if not settings.graphql_introspection:
            rules += DisableIntrospection().validation_rules
        return cls(tuple(rules), settings.graphql_max_tokens, settings.graphql_max_cost)


def cost_refusal(estimate: int, budget: int) -> GraphQLError:
    return GraphQLError(
        f"The query's estimated cost {estimate} is over the budget of {budget};"
        " ask for fewer items (first) or fewer fields.",
        extensions={"code": QUERY_TOO_COSTLY},
    )


def _items(first: object) -> int:
    """The items a list asked for with ``first`` may hold: its value, or the maximum when it is
    not a number (a variable not given); at least one."""
    return max(first if isinstance(first, int) else MAX_PAGE_SIZE, 1)


@dataclass(frozen=True)
class CostPlan:
    """A document's estimated cost as a function of its variables: ``fixed``, plus for each
    variable a ``first`` reads, the cost of one item times the items that variable asks for.

    Made once per document (the walk through the document and the schema), it estimates the
    cost of each request's variables with a few multiplications.
    """

    fixed: int = 0
    per_item: Mapping[str, CostPlan] = field(default_factory=dict)

    def __add__(self, other: CostPlan) -> CostPlan:
        per_item = dict(self.per_item)
        for variable, item in other.per_item.items():
            per_item[variable] = per_item[variable] + item if variable in per_item else item
        return CostPlan(self.fixed + other.fixed, per_item)

    def times(self, count: int) -> CostPlan:
        if count == 1:
            return self
        per_item = {variable: item.times(count) for variable, item in self.per_item.items()}
        return CostPlan(self.fixed * count, per_item)

    def estimate(self, variables: Mapping[str, Any] | None) -> int:
        given = variables or {}
        return self.fixed + sum(
            _items(given.get(variable)) * item.estimate(given)
            for variable, item in self.per_item.items()
        )


_ONE = CostPlan(1)
_NOTHING = CostPlan()


def cost_plan(schema: GraphQLSchema, document: DocumentNode) -> CostPlan:
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
    total = _NOTHING
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            root = schema.get_root_type(definition.operation)
            if root is not None:
                total += _cost_of(schema, fragments, definition.selection_set, root, frozenset())
    return total


def _first_of(field: FieldNode, definition: GraphQLField) -> int | str | None:
    """The items ``first`` asks for, or the variable that says; None without ``first``."""
    if "first" not in definition.args:
        return None
    for argument in field.arguments or ():
        if argument.name.value != "first":
            continue
        if isinstance(argument.value, IntValueNode):
            return int(argument.value.value)
        if isinstance(argument.value, VariableNode):
            return argument.value.name.value
    default = definition.args["first"].default_value
    return default if isinstance(default, int) else DEFAULT_PAGE_SIZE


def _field_cost(field: FieldNode, definition: GraphQLField, children: CostPlan) -> CostPlan:
    first = _first_of(field, definition)
    if isinstance(first, str):
        return CostPlan(1, {first: children})
    if first is not None:
        return _ONE + children.times(_items(first))
    returns = definition.type
    if isinstance(returns, GraphQLNonNull):
        returns = returns.of_type
    if isinstance(returns, GraphQLList) and field.name.value != "edges":
        return _ONE + children.times(DEFAULT_PAGE_SIZE)
    return _ONE + children


def _cost_of(
    schema: GraphQLSchema,
    fragments: Mapping[str, FragmentDefinitionNode],
    selection_set: SelectionSetNode | None,
    parent: GraphQLNamedType,
    seen: frozenset[str],
) -> CostPlan:
    if selection_set is None or not isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
        return _NOTHING
    total = _NOTHING
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            definition = parent.fields.get(selection.name.value)
            if definition is None:  # __typename, or an error validation reports
                total += _ONE
                continue
            named = get_named_type(definition.type)
            children = _cost_of(schema, fragments, selection.selection_set, named, seen)
            total += _field_cost(selection, definition, children)
        elif isinstance(selection, InlineFragmentNode):
            condition = selection.type_condition
            on = schema.get_type(condition.name.value) if condition else parent
            total += _cost_of(schema, fragments, selection.selection_set, on or parent, seen)
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if name in fragments and name not in seen:
                fragment = fragments[name]
                on = schema.get_type(fragment.type_condition.name.value) or parent
                total += _cost_of(schema, fragments, fragment.selection_set, on, seen | {name})
    return total


def estimate_cost(
    schema: GraphQLSchema, document: DocumentNode, variables: Mapping[str, Any] | None
) -> int:
    """The estimated cost of ``document`` run with ``variables`` (see ``cost_plan``)."""
    return cost_plan(schema, document).estimate(variables)
