"""Root fields of a query compiled to one SQL statement each, whose JSON PostgreSQL builds.

A dashboard's read (a page of deals with their steps, employees and customers) completes about
1,700 fields through graphql-core one at a time, from rows mapped to read models and then to
GraphQL objects. Compiled, the root field's selection becomes a read tree
(``platform.reads``): one statement builds the field's whole JSON, and the server passes
PostgreSQL's text through to the response (``orjson.Fragment``).

Each root field has one path, chosen before it runs (``ReadCompiler.compile`` and
``prepare``): the lists ``customers``, ``deals`` and ``activities``, the lookups ``customer``,
``deal`` and ``activity``, ``pipeline`` and ``pipelineSummary`` are compiled when everything
they select is an attribute (``customFields`` too), a nested object or list the read tree knows,
``__typename``, or a connection's ``edges``, ``cursor``, ``node``, ``pageInfo`` and
``totalCount``, through aliases, fragments and ``@skip``/``@include``, and the platform takes
their arguments. Anything else (and every mutation) runs through the resolvers, which then
refuse what they refuse. A compiled read refuses what the caller may not read (a department or
row it cannot see, a bad cursor, a custom filter its tenant's fields refuse) with the platform's
error, the one its resolver raises: the field's error, answered once. Arguments are graphql-core's coerced values, named and shaped as
the resolvers take them (``FieldDefinitions``, through Strawberry's public lookups).

A compiled tree is kept per root field of a document (the document cache keeps its parsed
text, so the same node comes back) and per value of the variables its ``@skip`` and
``@include`` read. No name or value of the request reaches SQL text: aliases and values are
bound (``platform.reads.repository``); a key that is one of the schema's own names may be written
as a column label (``SchemaKey``), the text then being the schema's.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

import structlog
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLField,
    GraphQLIncludeDirective,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLSkipDirective,
    InlineFragmentNode,
    SelectionSetNode,
    VariableNode,
)
from graphql.execution.values import VariableValues, get_argument_values, get_directive_values
from pydantic import BaseModel

from dealbase.errors import Invalid, NotFound
from dealbase.graphql_api import inputs
from dealbase.graphql_api.context import GraphQLContext
from dealbase.platform.activities import repository as activity_rows
from dealbase.platform.activities.models import ActivityFilter
from dealbase.platform.customers import repository as customer_rows
from dealbase.platform.customers.models import CustomerFilter
from dealbase.platform.deals import repository as deal_rows
from dealbase.platform.deals.models import DealFilter
from dealbase.platform.pagination import page_size
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.pipeline.models import SummaryRange
from dealbase.platform.reads import repository as reads
from dealbase.platform.reads.models import (
    Attribute,
    Constant,
    Cursor,
    CustomFields,
    Edges,
    EndCursor,
    Entry,
    Fields,
    Form,
    HasNextPage,
    Node,
    OneRead,
    PageInfo,
    PageRead,
    Related,
    RelatedList,
    SchemaKey,
    TotalCount,
)
from dealbase.platform.reads.service import OneReader, PageReader
from dealbase.platform.validation import department_of, validated

if TYPE_CHECKING:
    from dealbase.graphql_api.execution import FieldDefinitions

# Root fields compiled, per kind: a list's filter as the platform takes it, and as GraphQL's
# input (which the resolvers get, and ``inputs.filter_fields`` reads).
_LISTS: Mapping[str, tuple[type[BaseModel], type]] = {
    "customers": (CustomerFilter, inputs.CustomerFilter),
    "deals": (DealFilter, inputs.DealFilter),
    "activities": (ActivityFilter, inputs.ActivityFilter),
}
# What a row the caller cannot see answers, as the platform's ``get`` answers it.
_ROWS = {"customer": customer_rows.rows, "deal": deal_rows.rows, "activity": activity_rows.rows}
# Root fields of one object, and the read tree's name of it.
_ONES = {
    "customer": "customer",
    "deal": "deal",
    "activity": "activity",
    "pipeline": "pipeline",
    "pipelineSummary": "summary",
}
# The GraphQL object types the read tree knows, by kind.
_KINDS = {
    "Customer": "customer",
    "Deal": "deal",
    "Activity": "activity",
    "Step": "step",
    "Employee": "employee",
    "Department": "department",
    "Pipeline": "pipeline",
    "PipelineStep": "pipeline_step",
    "PipelineSummary": "summary",
    "StepSummary": "step_summary",
    "EmployeeSummary": "employee_summary",
}
_FORMS = {
    "UUID": Form.TEXT,
    "DateTime": Form.TIMESTAMP,
    "Date": Form.DATE,
    "String": Form.AS_IS,
    "Int": Form.AS_IS,
    "BigInt": Form.AS_IS,
    "Boolean": Form.AS_IS,
}
log = structlog.get_logger(__name__)
# Compiled trees kept per process (root fields of documents, by their skip/include values).
_KEPT = 256
P = TypeVar("P")  # a part of a page's read


class NotCompiled(Exception):
    """The selection has something the read tree does not read."""


def _named(type_: GraphQLOutputType) -> tuple[Any, bool]:
    """The named type under ``type_``'s wrappers, and whether it is a list."""
    many = False
    while isinstance(type_, GraphQLNonNull | GraphQLList):
        many = many or isinstance(type_, GraphQLList)
        type_ = type_.of_type
    return type_, many


def _form(type_: Any) -> Form:
    if isinstance(type_, GraphQLScalarType) and type_.name in _FORMS:
        return _FORMS[type_.name]
    # An enum whose stored values are its names in lower case (a step's kind, an activity's
    # type): PostgreSQL writes the name.
    if isinstance(type_, GraphQLEnumType) and all(
        getattr(value.value, "value", value.value) == name.lower()
        for name, value in type_.values.items()
    ):
        return Form.NAME
    raise NotCompiled(f"no form for {type_}")


@dataclass(frozen=True, slots=True)
class _NestedLength:
    """A nested list's ``first``, read from the request each time (a variable's value or the
    document's literal), bound as ``name``."""

    name: str
    field: GraphQLField
    node: FieldNode


@dataclass(frozen=True, slots=True)
class CompiledField:
    """A root field's read: a page or one row, and how to find its values in a request."""

    field_name: str
    field: GraphQLField
    node: FieldNode
    reader: PageReader | OneReader
    lengths: tuple[_NestedLength, ...]
    # Its arguments' Python names by their GraphQL names.
    argument_names: Mapping[str, str]


class _Walk:
    """One walk of a root field's selection into a read tree."""

    def __init__(
        self,
        definitions: FieldDefinitions,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: VariableValues,
    ) -> None:
        self.definitions = definitions
        self.fragments = fragments
        self.variables = variables
        self.lengths: list[_NestedLength] = []

    def collect(
        self, type_: GraphQLObjectType, selection_sets: list[SelectionSetNode]
    ) -> OrderedDict[str, list[FieldNode]]:
        """The fields selected on ``type_``, by response key, in the response's order (as
        graphql-core collects them)."""
        found: OrderedDict[str, list[FieldNode]] = OrderedDict()
        for selection_set in selection_sets:
            self._collect(type_, selection_set, found, set())
        return found

    def _collect(
        self,
        type_: GraphQLObjectType,
        selection_set: SelectionSetNode,
        found: OrderedDict[str, list[FieldNode]],
        visited: set[str],
    ) -> None:
        for selection in selection_set.selections:
            if not self._included(selection):
                continue
            if isinstance(selection, FieldNode):
                key = selection.alias.value if selection.alias else selection.name.value
                found.setdefault(key, []).append(selection)
            elif isinstance(selection, InlineFragmentNode):
                if self._applies(selection.type_condition, type_):
                    self._collect(type_, selection.selection_set, found, visited)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = self.fragments.get(name)
                if name in visited or fragment is None:
                    continue
                visited.add(name)
                if self._applies(fragment.type_condition, type_):
                    self._collect(type_, fragment.selection_set, found, visited)

    @staticmethod
    def _applies(condition: Any, type_: GraphQLObjectType) -> bool:
        return condition is None or condition.name.value == type_.name

    def _included(self, node: Any) -> bool:
        skip = get_directive_values(GraphQLSkipDirective, node, self.variables)
        if skip and skip.get("if"):
            return False
        include = get_directive_values(GraphQLIncludeDirective, node, self.variables)
        return not (include and not include.get("if"))

    def object_fields(self, type_: GraphQLObjectType, nodes: list[FieldNode]) -> Fields:
        kind = _KINDS.get(type_.name)
        if kind is None:
            raise NotCompiled(type_.name)
        selected_fields = self.collect(type_, _selections(nodes))
        if len(selected_fields) > reads.MAX_ENTRIES:
            raise NotCompiled(f"{len(selected_fields)} fields of one {type_.name}")
        fields: list[tuple[str, Entry]] = []
        for key, selected in selected_fields.items():
            fields.append((_schema_key(type_, key), self.entry(type_, kind, selected)))
        return tuple(fields)

    def entry(self, type_: GraphQLObjectType, kind: str, nodes: list[FieldNode]) -> Entry:
        name = nodes[0].name.value
        if name == "__typename":
            return Constant(type_.name)
        field = type_.fields.get(name)
        if field is None:
            raise NotCompiled(name)
        attribute = self.definitions.python_name(type_.name, name)
        named, many = _named(field.type)
        related = reads.relation(kind, attribute)
        if related is not None and isinstance(named, GraphQLObjectType):
            child_kind, related_many = related
            if related_many != many or _KINDS.get(named.name) != child_kind:
                raise NotCompiled(name)
            fields = self.object_fields(named, nodes)
            if not many:
                return Related(attribute, fields)
            limit = None
            if "first" in field.args:
                limit = f"nested_length_{len(self.lengths)}"
                self.lengths.append(_NestedLength(limit, field, nodes[0]))
            elif field.args:
                raise NotCompiled(name)
            return RelatedList(attribute, fields, limit)
        if reads.shows_custom_fields(kind, attribute) and not field.args:
            return CustomFields()
        if field.args or many or not reads.readable(kind, attribute):
            raise NotCompiled(name)
        return Attribute(attribute, _form(named))

    def page(self, field_name: str, type_: GraphQLObjectType, nodes: list[FieldNode]) -> PageRead:
        def part_of(name: str, selected: list[FieldNode]) -> TotalCount | PageInfo | Edges | None:
            if name == "totalCount":
                return TotalCount()
            if name == "pageInfo":
                return PageInfo(self._page_info(type_, selected))
            if name == "edges":
                return Edges(self._edges(type_, selected))
            return None

        return PageRead(field_name, self._parts(type_, nodes, part_of))

    def _page_info(
        self, connection: GraphQLObjectType, nodes: list[FieldNode]
    ) -> tuple[tuple[str, HasNextPage | EndCursor | Constant], ...]:
        type_, _ = _named(connection.fields["pageInfo"].type)
        parts: dict[str, HasNextPage | EndCursor] = {
            "hasNextPage": HasNextPage(),
            "endCursor": EndCursor(),
        }
        return self._parts(type_, nodes, lambda name, _: parts.get(name))

    def _edges(
        self, connection: GraphQLObjectType, nodes: list[FieldNode]
    ) -> tuple[tuple[str, Cursor | Node | Constant], ...]:
        type_, _ = _named(connection.fields["edges"].type)

        def part_of(name: str, selected: list[FieldNode]) -> Cursor | Node | None:
            if name == "node":
                node_type, _ = _named(type_.fields["node"].type)
                return Node(self.object_fields(node_type, selected))
            return Cursor() if name == "cursor" else None

        parts: tuple[tuple[str, Cursor | Node | Constant], ...] = self._parts(type_, nodes, part_of)
        return tuple((_schema_key(type_, key), part) for key, part in parts)

    def _parts(
        self,
        type_: GraphQLObjectType,
        nodes: list[FieldNode],
        part_of: Callable[[str, list[FieldNode]], P | None],
    ) -> tuple[tuple[str, P | Constant], ...]:
        """The selected fields by key: ``part_of``'s parts, ``__typename`` the type's name."""
        parts: list[tuple[str, P | Constant]] = []
        for key, selected in self.collect(type_, _selections(nodes)).items():
            name = selected[0].name.value
            part = Constant(type_.name) if name == "__typename" else part_of(name, selected)
            if part is None:
                raise NotCompiled(name)
            parts.append((key, part))
        return tuple(parts)


def _schema_key(type_: GraphQLObjectType, key: str) -> str:
    """``key`` marked a ``SchemaKey`` when it is one of ``type_``'s own names: only then may the
    statement write it as SQL text."""
    return SchemaKey(key) if key in type_.fields or key == "__typename" else key


def _selections(nodes: list[FieldNode]) -> list[SelectionSetNode]:
    return [node.selection_set for node in nodes if node.selection_set is not None]


def _directive_variables(
    nodes: list[FieldNode], fragments: Mapping[str, FragmentDefinitionNode]
) -> tuple[str, ...]:
    """The variables the ``@skip`` and ``@include`` under ``nodes`` read, in a fixed order."""
    found: set[str] = set()
    seen: set[str] = set()

    def visit(node: Any) -> Iterator[Any]:
        for directive in getattr(node, "directives", None) or ():
            for argument in directive.arguments:
                if isinstance(argument.value, VariableNode):
                    found.add(argument.value.name.value)
        if isinstance(node, FragmentSpreadNode) and node.name.value not in seen:
            seen.add(node.name.value)
            fragment = fragments.get(node.name.value)
            if fragment is not None:
                yield fragment.selection_set
        selection_set = getattr(node, "selection_set", None)
        if selection_set is not None:
            yield selection_set

    pending: list[Any] = list(nodes)
    while pending:
        node = pending.pop()
        for selection_set in visit(node):
            pending.extend(selection_set.selections)
    return tuple(sorted(found))


def _summary_read(
    reader: PageReader | OneReader, given: dict[str, Any], arguments: dict[str, Any]
) -> PreparedRead:
    """``pipelineSummary``'s read, over the period its arguments give."""
    period = pipeline.checked_period(
        validated(
            SummaryRange,
            {
                "created_from": arguments["created_from"],
                "created_to": arguments["created_to"],
            },
        )
    )
    # The period's ends as the resolvers show them (DateTime: isoformat).
    given |= {
        "summary_from": period.created_from,
        "summary_to": period.created_to,
        "summary_from_text": period.created_from.isoformat(),
        "summary_to_text": period.created_to.isoformat(),
    }
    return PreparedRead(reader, given, arguments.get("department_id"))


def _page_read(
    name: str, reader: PageReader | OneReader, given: dict[str, Any], arguments: dict[str, Any]
) -> PreparedRead:
    """A list's read of a page, filtered and ordered as its arguments say."""
    order = arguments.get("order_by")
    if isinstance(order, Enum):  # the argument's default, a member of DealOrder
        order = order.value
    given_filter = inputs.filter_fields(arguments.get("filter"))
    fields = {**given_filter.fields, **({} if order is None else {"order_by": order})}
    return PreparedRead(
        reader,
        given,
        given_filter.department_id,
        filters=validated(_LISTS[name][0], fields),
        first=arguments["first"],
        after=arguments["after"],
        custom_filters=given_filter.custom,
    )


class ReadCompiler:
    """Compiles a query's root fields (``compile``) and keeps what it compiled."""

    def __init__(self, schema: GraphQLSchema, definitions: FieldDefinitions) -> None:
        self.schema = schema
        self.definitions = definitions
        # id of a root field's first node -> (the node, the variables its directives read,
        # compiled per their values; None where it does not compile).
        self._kept: OrderedDict[
            int, tuple[FieldNode, tuple[str, ...], dict[tuple[Any, ...], CompiledField | None]]
        ] = OrderedDict()

    def compile(
        self,
        nodes: list[FieldNode],
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: VariableValues,
    ) -> CompiledField | None:
        first = nodes[0]
        kept = self._kept.get(id(first))
        if kept is None or kept[0] is not first:
            kept = (first, _directive_variables(nodes, fragments), {})
            self._kept[id(first)] = kept
            if len(self._kept) > _KEPT:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(id(first))
        _, directive_variables, by_values = kept
        values = tuple(variables.coerced.get(name) for name in directive_variables)
        if values not in by_values:
            by_values[values] = self._compiled(nodes, fragments, variables)
        return by_values[values]

    def _compiled(
        self,
        nodes: list[FieldNode],
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: VariableValues,
    ) -> CompiledField | None:
        name = nodes[0].name.value
        query = self.schema.query_type
        field = None if query is None else query.fields.get(name)
        if query is None or field is None or (name not in _LISTS and name not in _ONES):
            return None
        walk = _Walk(self.definitions, fragments, variables)
        type_, _ = _named(field.type)
        try:
            arguments = self.definitions.argument_names(query.name, name)
            if name in _LISTS:
                reader: PageReader | OneReader = PageReader(walk.page(name, type_, nodes))
            else:
                reader = OneReader(OneRead(_ONES[name], walk.object_fields(type_, nodes)))
        except NotCompiled:
            return None
        except Exception:
            # A tree the platform could not build is a fault of ours: the resolvers answer.
            log.exception("graphql_compile_failed", field=name)
            return None
        return CompiledField(name, field, nodes[0], reader, tuple(walk.lengths), arguments)

    def prepare(self, compiled: CompiledField, variables: VariableValues) -> PreparedRead | None:
        """The root field's read with this request's arguments, or None where the resolvers
        must answer instead (arguments the platform refuses: a page size out of range, a
        filter or a period it does not take)."""
        try:
            given: dict[str, Any] = {
                length.name: page_size(
                    get_argument_values(length.field, length.node, variables)["first"]
                )
                for length in compiled.lengths
            }
            arguments = self._arguments(compiled, variables)
            name = compiled.field_name
            if name == "pipelineSummary":
                return _summary_read(compiled.reader, given, arguments)
            if name == "pipeline":
                return PreparedRead(compiled.reader, given, arguments.get("department_id"))
            if isinstance(compiled.reader, OneReader):
                return PreparedRead(compiled.reader, given, row_id=arguments["id"])
            return _page_read(name, compiled.reader, given, arguments)
        except Invalid:
            return None
        except Exception:
            # Arguments the platform could not take are a fault of ours: the resolvers answer.
            log.exception("graphql_prepare_failed", field=compiled.field_name)
            return None

    def _arguments(self, compiled: CompiledField, variables: VariableValues) -> dict[str, Any]:
        """The root field's arguments as its resolver takes them (graphql-core's coerced
        values by their Python names), a filter as its input object, absent fields UNSET."""
        field, name = compiled.field, compiled.field_name
        names = compiled.argument_names
        arguments = {}
        for key, value in get_argument_values(field, compiled.node, variables).items():
            if key == "filter" and value is not None:
                filter_type = getattr(field.args[key].type, "name", "")
                python_name = self.definitions.python_name
                value = _LISTS[name][1](
                    **{python_name(filter_type, given): item for given, item in value.items()}
                )
            arguments[names[key]] = value
        return arguments


@dataclass(frozen=True, slots=True)
class PreparedRead:
    """A compiled root field with a request's arguments applied: what of its read depends on
    the arguments alone, which the same request body always gives, so it can be kept and run
    again for any caller (``run``)."""

    reader: PageReader | OneReader
    # The nested lists' lengths (and a summary's period), by the names the tree gives them.
    given: dict[str, Any]
    # The department the arguments name (a list's filter, the board's or summary's
    # ``departmentId``), judged against each caller.
    department_id: uuid.UUID | None = None
    row_id: uuid.UUID | None = None
    filters: BaseModel | None = None
    first: int | None = None
    after: str | None = None
    # A list's custom filters, judged by each caller's tenant's fields (``PageReader.run``).
    custom_filters: Mapping[str, object] | None = None

    async def run(self, context: GraphQLContext, last: bool = False) -> str:
        """The root field's JSON text for the caller of ``context``. What the caller may not
        read (a department or row it cannot see, a bad cursor) raises the platform's error,
        which the resolver would raise for the same request. ``last``: no other read follows
        in the request, so a page's statement carries the read transaction's COMMIT
        (``PageReader.run``)."""
        reader, given = self.reader, self.given
        if isinstance(reader, PageReader):
            scope = await context.scope_in(self.department_id)
            filters, first, after = self.filters, self.first, self.after
            assert filters is not None
            caller_department, custom = context.scope.department_id, self.custom_filters
            return await context.run(
                lambda uow: reader.run(
                    uow, filters, first, after, given, caller_department, custom, last=last
                ),
                scope,
            )
        resource = reader.read.resource
        if resource not in ("pipeline", "summary"):
            row_id = self.row_id
            found = await context.run(lambda uow: reader.run(uow, row_id, given))
            if found is None:
                assert row_id is not None
                raise _ROWS[resource].not_found(row_id)
            return found
        # The board or the summary of the department the key names, or of the one
        # departmentId names: the board's row is its department, a summary has none.
        scope = await context.scope_in(self.department_id)
        row = department_of(scope) if resource == "pipeline" else None
        found = await context.run(lambda uow: reader.run(uow, row, given), scope)
        if found is None:
            raise NotFound(f"No department has the id {row}.")
        return found


_compilers: WeakKeyDictionary[GraphQLSchema, ReadCompiler] = WeakKeyDictionary()


def compiler_of(schema: GraphQLSchema, definitions: FieldDefinitions) -> ReadCompiler:
    """The compiler of ``schema`` (an execution's, graphql-core's public ``schema``), made on
    its first query and kept as long as the schema lives."""
    compiler = _compilers.get(schema)
    if compiler is None:
        compiler = _compilers[schema] = ReadCompiler(schema, definitions)
    return compiler
