"""GraphQL documents read once per worker process, not once per request.

A dashboard sends the same few documents again and again. The first time a text arrives it is
parsed (at most the guards' tokens), validated (GraphQL's rules and the guards': depth, aliases,
introspection) and its cost planned; each time it arrives again, all three come from a bounded
cache, and only the cost of the request's own variables is estimated, from the plan.

The cache is keyed by the text alone, because everything else the verdict depends on is fixed
for the schema that owns the cache (the schema, the rules, the token limit, the budget), and
what varies per request (the variables ``first`` reads) is applied per request. Only documents
that parse are kept: a syntax error, or a document over the token limit, is parsed and refused
again each time (reading stops at the limit), so a refusal is never kept as a success. A
document validation refuses is kept with its errors, and refused again from the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from graphql import DocumentNode, GraphQLError, GraphQLSchema, ValidationContext, ValidationRule
from graphql.validation import specified_rules
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

from dealbase.graphql_api.guards import CostPlan, Guards, cost_plan, cost_refusal

# Where the cost refusal goes among a document's errors, replaced by the refusal itself.
_COST_REFUSAL = GraphQLError("The estimated cost is over the budget.")


class _CostRefusalPlace(ValidationRule):
    """Reports the cost refusal where it has always been reported: after the depth and alias
    limits (which also report as they are made), before the rules that report as they visit the
    document. So a refused document lists its errors in the same order, and validation gives up
    after the same number of them (it stops at 100)."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        context.report_error(_COST_REFUSAL)


@dataclass(eq=False, slots=True)
class CheckedDocument:
    """A document as parsed, its cost plan, and its validation errors within the cost budget
    and over it, each found the first time a request's variables put the document there."""

    document: DocumentNode
    cost: CostPlan
    errors_within_budget: tuple[GraphQLError, ...] | None = None
    errors_over_budget: tuple[GraphQLError, ...] | None = None


class DocumentCache:
    """The checked documents of one schema by their text, the least recently used dropped when
    there are more than ``size``. Used from the event loop of one worker, so unlocked."""

    def __init__(self, guards: Guards, size: int) -> None:
        self.guards = guards
        self.size = size
        self._documents: OrderedDict[str, CheckedDocument] = OrderedDict()
        self._rules = (*specified_rules, *guards.validation_rules)

    def get(self, text: str) -> CheckedDocument | None:
        checked = self._documents.get(text)
        if checked is not None:
            self._documents.move_to_end(text)
        return checked

    def keep(self, schema: GraphQLSchema, text: str, document: DocumentNode) -> CheckedDocument:
        """Plans the cost of ``document`` just parsed from ``text``, and keeps it."""
        checked = CheckedDocument(document, cost_plan(schema, document))
        self._documents[text] = checked
        if len(self._documents) > self.size:
            self._documents.popitem(last=False)
        return checked

    def errors(
        self, schema: GraphQLSchema, checked: CheckedDocument, estimate: int
    ) -> list[GraphQLError]:
        """The errors of ``checked`` with a cost of ``estimate``, a list of this request's own."""
        if estimate <= self.guards.max_cost:
            if checked.errors_within_budget is None:
                errors = validate_document(schema, checked.document, self._rules)
                checked.errors_within_budget = tuple(errors)
            return list(checked.errors_within_budget)
        if checked.errors_over_budget is None:
            rules = (*self._rules, _CostRefusalPlace)
            checked.errors_over_budget = tuple(validate_document(schema, checked.document, rules))
        refusal = cost_refusal(estimate, self.guards.max_cost)
        return [
            refusal if error is _COST_REFUSAL else error for error in checked.errors_over_budget
        ]


class DocumentGuard(SchemaExtension):
    """One operation's document: taken from the cache or parsed, checked there, refused with its
    errors before anything runs, and its estimated cost reported in ``extensions.cost``."""

    def __init__(self, documents: DocumentCache) -> None:
        self.documents = documents
        self.checked: CheckedDocument | None = None
        self.estimate: int | None = None

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query is not None:
            self.checked = self.documents.get(context.query)
        if self.checked is not None:
            # Strawberry parses only when no document is there yet.
            context.graphql_document = self.checked.document
        else:
            context.parse_options["max_tokens"] = self.documents.guards.max_tokens
        yield

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        schema = context.schema._schema
        checked = self.checked
        if checked is None:
            # Validation follows a document parsed from a text, so both are there.
            assert context.query is not None
            assert context.graphql_document is not None
            checked = self.documents.keep(schema, context.query, context.graphql_document)
        self.estimate = checked.cost.estimate(context.variables)
        # Strawberry validates only when no errors are there yet: an empty list stands for
        # a valid document.
        context.pre_execution_errors = self.documents.errors(schema, checked, self.estimate)
        yield

    def get_results(self) -> dict[str, Any]:
        if self.estimate is None:
            return {}
        return {"cost": {"estimated": self.estimate, "budget": self.documents.guards.max_cost}}
