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
from typing import Any, cast

from graphql import DocumentNode, GraphQLError, GraphQLSchema, ValidationContext, ValidationRule
from graphql.validation import specified_rules
from strawberry.extensions import SchemaExtension

from dealbase.graphql_api.guards import CostPlan, Guards, cost_plan, cost_refusal


@dataclass(eq=False, slots=True)
class CheckedDocument:
    """A document as parsed, its cost plan, and its validation errors within the cost budget
    and over it, each found the first time a request's variables put the document there (over
    the budget, the cost refusal among them is this request's: ``refusal`` says which)."""

    document: DocumentNode
    cost: CostPlan
    errors_within_budget: tuple[GraphQLError, ...] | None = None
    errors_over_budget: tuple[GraphQLError, ...] | None = None
    refusal: GraphQLError | None = None


class DocumentCache:
    """The checked documents of one schema by their text, the least recently used dropped when
    there are more than ``size``. Used from the event loop of one worker, so unlocked.

    ``schema`` is the GraphQLSchema Strawberry validates against, learnt from its first
    validation (``ValidationContext.schema``): Strawberry has no public accessor of it."""

    def __init__(self, guards: Guards, size: int) -> None:
        self.guards = guards
        self.size = size
        self.schema: GraphQLSchema | None = None
        self._documents: OrderedDict[str, CheckedDocument] = OrderedDict()
        self.rules = (*specified_rules, *guards.validation_rules)

    def get(self, text: str) -> CheckedDocument | None:
        checked = self._documents.get(text)
        if checked is not None:
            self._documents.move_to_end(text)
        return checked

    def keep(self, text: str, document: DocumentNode, cost: CostPlan) -> CheckedDocument:
        """Keeps ``document`` just parsed from ``text`` and validated, with its cost plan."""
        checked = CheckedDocument(document, cost)
        self._documents[text] = checked
        if len(self._documents) > self.size:
            self._documents.popitem(last=False)
        return checked

    def errors(self, checked: CheckedDocument, estimate: int) -> list[GraphQLError] | None:
        """The errors of ``checked`` with a cost of ``estimate``, a list of this request's own;
        None until a request with such a cost has been validated."""
        budget = self.guards.max_cost
        if estimate <= budget:
            within = checked.errors_within_budget
            return None if within is None else list(within)
        over = checked.errors_over_budget
        if over is None:
            return None
        refusal = cost_refusal(estimate, budget)
        return [refusal if error is checked.refusal else error for error in over]

    def remember(
        self,
        checked: CheckedDocument,
        estimate: int,
        errors: list[GraphQLError],
        check: type[_Check],
    ) -> None:
        """Keeps what Strawberry's validation found for a request with a cost of ``estimate``."""
        if estimate <= self.guards.max_cost:
            checked.errors_within_budget = tuple(errors)
        else:
            checked.errors_over_budget, checked.refusal = tuple(errors), check.refusal


class _Check(ValidationRule):
    """The cost check of one request, among the rules Strawberry's validation runs: it plans
    the document's cost (against the schema it validates with) unless it was, estimates this request's, and
    refuses it when over the budget. Listed after the depth and alias limits, which report as
    they are made, and reporting as it is made, it places the refusal after theirs and before
    the errors of the rules that report as they visit the document, the same place each time
    (and validation gives up after the same 100 errors)."""

    guard: DocumentGuard
    plan: CostPlan | None = None
    refusal: GraphQLError | None = None

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        guard, check = self.guard, type(self)
        documents = guard.documents
        documents.schema = context.schema
        plan = check.plan = check.plan or cost_plan(context.schema, context.document)
        estimate = guard.estimate = plan.estimate(guard.execution_context.variables)
        if estimate > documents.guards.max_cost:
            check.refusal = cost_refusal(estimate, documents.guards.max_cost)
            context.report_error(check.refusal)


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
        checked = self.checked
        if checked is not None:
            self.estimate = checked.cost.estimate(context.variables)
            errors = self.documents.errors(checked, self.estimate)
            if errors is not None:
                # Strawberry validates only when no errors are there yet: an empty list stands
                # for a valid document.
                context.pre_execution_errors = errors
                yield
                return
        # Strawberry validates, against its own GraphQLSchema, with these rules; what it finds
        # is kept for the next request.
        plan = None if checked is None else checked.cost  # a document kept: planned already
        check = cast("type[_Check]", type("Check", (_Check,), {"guard": self, "plan": plan}))
        context.validation_rules = (*self.documents.rules, check)
        yield
        if check.plan is None or context.pre_execution_errors is None or self.estimate is None:
            return  # not validated (the operation was refused before)
        if checked is None:
            assert context.query is not None
            assert context.graphql_document is not None
            checked = self.documents.keep(context.query, context.graphql_document, check.plan)
        self.documents.remember(checked, self.estimate, context.pre_execution_errors, check)

    def get_results(self) -> dict[str, Any]:
        if self.estimate is None:
            return {}
        return {"cost": {"estimated": self.estimate, "budget": self.documents.guards.max_cost}}
