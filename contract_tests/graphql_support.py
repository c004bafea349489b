"""What the GraphQL contract suite needs: the schema, its server-error check, and its rules.

The schema is the one the app builds (``build_schema``), read through GraphQL introspection at
import time without a database, as ``support.py`` does for the OpenAPI document; a test pins it
to what the session app answers to an introspection query.

What a server error is here. The service answers domain and input errors with HTTP 200 and an
error whose ``extensions.code`` names them (``not_found``, ``validation_failed``,
``invalid_query``, ``query_too_costly`` ...), raised by a resolver, so with a ``path``. Only an
unexpected failure is ``INTERNAL`` (``graphql_api/errors.py`` maps every exception that is not a
domain or GraphQL error to it). schemathesis's built-in ``not_a_server_error`` calls every error
with a ``path`` a server error unless it carries one of the Apollo or graphql-java markers it knows,
so it would report each ``not_found`` as a finding. ``not_a_graphql_server_error`` replaces it with
this service's taxonomy: a 5xx, an ``INTERNAL`` error, or an error without a code (every error
must carry one) fails; a documented domain or input error does not.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import graphql
import schemathesis
from hypothesis import strategies as st
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.failures import Failure, ServerError, Severity
from schemathesis.core.transport import Response
from schemathesis.specs.graphql import nodes
from schemathesis.specs.graphql.schemas import GraphQLSchema

from contract_tests.support import REQUEST_GIVE_UP_SECONDS, SEED, SESSION_APP
from dealbase.config import Settings
from dealbase.graphql_api.api import GRAPHQL_PATH
from dealbase.graphql_api.errors import INTERNAL
from dealbase.graphql_api.guards import estimate_cost
from dealbase.graphql_api.schema import build_schema
from dealbase.platform.pagination import MAX_PAGE_SIZE
from tests.depth import DEPTH

_DOCUMENT_ONLY_DATABASE_URL = "postgresql://contract-document.invalid/none"

# The service's BigInt is 64-bit (its description says so; a wider literal is a GraphQL
# validation error, as for Int). schemathesis's built-in BigInt strategy is unbounded, so a
# positive case would carry a value the scalar itself refuses.
_BIG_INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
schemathesis.graphql.scalar("BigInt", _BIG_INT.map(nodes.Int))


# Everything introspection can say (descriptions, deprecated inputs, ...), so the pin is complete.
INTROSPECTION_QUERY = graphql.get_introspection_query(
    descriptions=True,
    specified_by_url=True,
    directive_is_repeatable=True,
    schema_description=True,
    input_value_deprecation=True,
)


def import_time_introspection() -> dict[str, Any]:
    """The introspection result of the schema the app serves, built without a database."""
    settings = Settings(database_url=_DOCUMENT_ONLY_DATABASE_URL, log_level="warning")
    result = graphql.graphql_sync(build_schema(settings)._schema, INTROSPECTION_QUERY)
    if result.errors or result.data is None:
        raise RuntimeError(f"introspection failed: {result.errors}")
    return result.data


def graphql_config() -> schemathesis.Config:
    """Positive and negative queries, bounded and reproducible, every default check enabled."""
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            # A hang guard only, as the OpenAPI suites' (contract_tests/support.py).
            "request-timeout": REQUEST_GIVE_UP_SECONDS,
            "generation": {
                # Per query and mutation (39 of them); GraphQL has no examples or coverage
                # phase, so this number alone bounds the run.
                "max-examples": DEPTH.examples_per_root_field,
                # No example database: a run depends on the seed alone, not on earlier runs.
                "database": "none",
            },
        }
    )


def load_graphql_schema(introspection: dict[str, Any], app: Any = SESSION_APP) -> GraphQLSchema:
    """``introspection`` as a schemathesis schema whose requests go in-process to ``app``."""
    schema = schemathesis.graphql.from_dict(introspection, config=graphql_config())
    schema.app = app
    schema.location = GRAPHQL_PATH
    return schema


class GraphQLInternalError(Failure):
    """A response carries an ``INTERNAL`` error, or an error without ``extensions.code``."""

    code = "ST901"
    checks = ("not_a_graphql_server_error",)
    kind_title = "GraphQL internal error"

    __slots__ = ("errors",)

    def __init__(self, *, operation: str, errors: list[object]) -> None:
        super().__init__(
            operation=operation,
            message=json.dumps(errors, indent=2, ensure_ascii=False),
            severity=Severity.CRITICAL,
        )
        self.errors = errors

    @property
    def _unique_key(self) -> str:
        return json.dumps(sorted(str(_code_of(error)) for error in self.errors))


def _code_of(error: object) -> object:
    if not isinstance(error, dict):
        return None
    extensions = error.get("extensions")
    return extensions.get("code") if isinstance(extensions, dict) else None


def _is_server_side(error: object) -> bool:
    code = _code_of(error)
    return not isinstance(code, str) or not code or code == INTERNAL


def not_a_graphql_server_error(
    ctx: CheckContext, response: Response, case: schemathesis.Case[Any]
) -> bool | None:
    """No 5xx, and no error that is ``INTERNAL`` or unclassified (see the module's docstring)."""
    if response.status_code >= 500:
        raise ServerError(operation=case.operation.label, status_code=response.status_code)
    try:
        payload = json.loads(response.content)
    except ValueError:
        return None  # not JSON: response_schema_conformance reports that
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if not isinstance(errors, list):
        return None
    server_side = [error for error in errors if _is_server_side(error)]
    if server_side:
        raise GraphQLInternalError(operation=case.operation.label, errors=server_side)
    return None


def call_and_validate_graphql(case: schemathesis.Case[Any], headers: Mapping[str, str]) -> Response:
    """Send ``case`` and run every default check, with the server-error check of this service."""
    return case.call_and_validate(
        headers=dict(headers),
        excluded_checks=[not_a_server_error],
        additional_checks=[not_a_graphql_server_error],
    )


@dataclass(frozen=True)
class GraphQLRows:
    """Real rows of the suite's department, for arguments that name one."""

    department_id: str
    customer_id: str
    deal_id: str
    employee_id: str
    step_id: str
    activity_id: str
    webhook_endpoint_id: str
    webhook_delivery_id: str

    def for_argument(self, name: str) -> str | None:
        return {
            "departmentId": self.department_id,
            "customerId": self.customer_id,
            "dealId": self.deal_id,
            "employeeId": self.employee_id,
            "stepId": self.step_id,
            "endpointId": self.webhook_endpoint_id,
            "deliveryId": self.webhook_delivery_id,
        }.get(name)

    def for_id_of(self, root_field: str) -> str | None:
        """The row an ``id`` argument of ``root_field`` names (``updateDeal`` -> the deal)."""
        lowered = root_field.lower()
        for kind, row_id in (
            ("customer", self.customer_id),
            ("activity", self.activity_id),
            ("deal", self.deal_id),
        ):
            if lowered.endswith(kind):
                return row_id
        return None


@dataclass
class GraphQLRules:
    """Rules the server enforces on purpose that a GraphQL schema cannot state, and the narrow
    adaptations of generated positive queries that keep the suite from reporting them.

    Each rewrites a literal the schema accepts into another it accepts, in positive cases only:
    a negative query is refused by GraphQL validation before any rule applies.

    - ``first`` is 1 to 100, and a query's estimated cost (docs/graphql.md, "Guards") is at most
      the budget, or the query is refused before it runs (``validation_failed``,
      ``query_too_costly``). A generated ``first`` is any 32-bit integer, so nearly every list
      query would be refused: each literal ``first`` is clamped into 1..100, and the largest is
      halved until the estimate fits the budget. A query still over budget with every ``first``
      at 1 (nested lists without ``first`` count 25 items each) then loses its deepest nested
      object fields, one at a time, each selection keeping at least one field, until it fits.
    - An id must name a row the key can see, or the answer is ``not_found``. A generated uuid
      never does, so every other positive case of an operation names the department's real
      rows instead (the others keep theirs, and reach the ``not_found`` branches).
    """

    client_schema: graphql.GraphQLSchema
    cost_budget: int
    _seen: dict[str, int] = field(default_factory=dict)

    def adapt(self, case: schemathesis.Case[Any], rows: GraphQLRows) -> None:
        if case.meta is None or not case.meta.generation.mode.is_positive:
            return
        if not isinstance(case.body, str):
            return
        document = self._fit_page_sizes(graphql.parse(case.body))
        label = case.operation.label
        self._seen[label] = self._seen.get(label, 0) + 1
        if self._seen[label] % 2 == 0:
            document = _refer_to_rows(document, rows)
        case.body = graphql.print_ast(document)

    def _fit_page_sizes(self, document: graphql.DocumentNode) -> graphql.DocumentNode:
        sizes = [min(max(size, 1), MAX_PAGE_SIZE) for size in _page_sizes(document)]
        fitted = _with_page_sizes(document, sizes)
        while sizes and self._over_budget(fitted):
            largest = max(range(len(sizes)), key=sizes.__getitem__)
            if sizes[largest] == 1:
                break
            sizes[largest] //= 2
            fitted = _with_page_sizes(document, sizes)
        while self._over_budget(fitted):
            removable = _removable_fields(fitted)
            if not removable:
                break
            _, deepest = max(removable, key=lambda found: found[0])
            fitted = graphql.visit(fitted, _Without(deepest))
        return fitted

    def _over_budget(self, document: graphql.DocumentNode) -> bool:
        return estimate_cost(self.client_schema, document, None) > self.cost_budget


NodeT = TypeVar("NodeT", bound=graphql.Node)


def _replaced(node: NodeT, **changes: Any) -> NodeT:
    """A copy of ``node`` with ``changes`` (AST nodes are immutable since graphql-core 3.3)."""
    return type(node)(**{**{key: getattr(node, key) for key in node.keys}, **changes})


class _NestedFields(graphql.Visitor):
    """Collects, with their depth, the nested fields with selections of their own that their
    selection could do without (it has another)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[int, graphql.FieldNode]] = []

    def enter_selection_set(
        self,
        node: graphql.SelectionSetNode,
        key: object,
        parent: object,
        path: object,
        ancestors: list[object],
    ) -> None:
        depth = sum(isinstance(item, graphql.FieldNode) for item in [*ancestors, parent])
        if depth == 0 or len(node.selections) < 2:
            return
        for selection in node.selections:
            if isinstance(selection, graphql.FieldNode) and selection.selection_set is not None:
                self.found.append((depth, selection))


def _removable_fields(document: graphql.DocumentNode) -> list[tuple[int, graphql.FieldNode]]:
    visitor = _NestedFields()
    graphql.visit(document, visitor)
    return visitor.found


class _Without(graphql.Visitor):
    """Removes one field node."""

    def __init__(self, field: graphql.FieldNode) -> None:
        super().__init__()
        self._field = field

    def enter_field(self, node: graphql.FieldNode, *_: object) -> object:
        return graphql.REMOVE if node is self._field else None


def _is_page_size(node: graphql.ArgumentNode) -> bool:
    return node.name.value == "first" and isinstance(node.value, graphql.IntValueNode)


class _PageSizes(graphql.Visitor):
    """Collects the literal ``first`` arguments in document order, or replaces them by
    ``replacements`` in the same order."""

    def __init__(self, replacements: list[int] | None = None) -> None:
        super().__init__()
        self.found: list[int] = []
        self._replacements = replacements

    def enter_argument(self, node: graphql.ArgumentNode, *_: object) -> graphql.ArgumentNode:
        if not _is_page_size(node):
            return node
        assert isinstance(node.value, graphql.IntValueNode)
        self.found.append(int(node.value.value))
        if self._replacements is None:
            return node
        size = self._replacements[len(self.found) - 1]
        return _replaced(node, value=graphql.IntValueNode(value=str(size)))


def _page_sizes(document: graphql.DocumentNode) -> list[int]:
    visitor = _PageSizes()
    graphql.visit(document, visitor)
    return visitor.found


def _with_page_sizes(document: graphql.DocumentNode, sizes: list[int]) -> graphql.DocumentNode:
    edited: graphql.DocumentNode = graphql.visit(document, _PageSizes(sizes))
    return edited


class _RealIds(graphql.Visitor):
    """Replaces the uuid literals of a root field's arguments by the rows they refer to."""

    def __init__(self, rows: GraphQLRows) -> None:
        super().__init__()
        self._rows = rows
        self._fields: list[str] = []

    def enter_field(self, node: graphql.FieldNode, *_: object) -> None:
        self._fields.append(node.name.value)

    def leave_field(self, node: graphql.FieldNode, *_: object) -> None:
        self._fields.pop()

    def enter_argument(self, node: graphql.ArgumentNode, *_: object) -> graphql.ArgumentNode:
        if len(self._fields) != 1:
            return node
        name = node.name.value
        rows = self._rows
        real = rows.for_id_of(self._fields[0]) if name == "id" else rows.for_argument(name)
        return _replaced(node, value=_with_real_ids(node.value, real, rows))


def _refer_to_rows(document: graphql.DocumentNode, rows: GraphQLRows) -> graphql.DocumentNode:
    edited: graphql.DocumentNode = graphql.visit(document, _RealIds(rows))
    return edited


def _with_real_ids(
    value: graphql.ValueNode, real: str | None, rows: GraphQLRows
) -> graphql.ValueNode:
    """``value`` with its uuid literals replaced by ``real`` (and input fields' by theirs)."""
    if isinstance(value, graphql.StringValueNode):
        if real is not None and _is_uuid(value.value):
            return graphql.StringValueNode(value=real)
        return value
    if isinstance(value, graphql.ListValueNode):
        return _replaced(
            value, values=tuple(_with_real_ids(item, real, rows) for item in value.values)
        )
    if isinstance(value, graphql.ObjectValueNode):
        fields = tuple(
            _replaced(
                item, value=_with_real_ids(item.value, rows.for_argument(item.name.value), rows)
            )
            for item in value.fields
        )
        return _replaced(value, fields=fields)
    return value


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
