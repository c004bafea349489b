"""Errors leave GraphQL with the REST API's codes in ``extensions.code``: mapped here, once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import structlog
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.schema.exceptions import InvalidOperationTypeError

from dealbase.errors import (
    BatchRejected,
    DomainError,
    FieldError,
    Invalid,
    RateLimited,
    Unavailable,
)
from dealbase.platform.shapes import CUSTOM_FIELDS

log = structlog.get_logger(__name__)

INTERNAL = "INTERNAL"
INVALID_QUERY = "invalid_query"
# A query or mutation sent over a live transport, which serves subscriptions only.
NOT_A_SUBSCRIPTION = "operation_not_subscription"
# Platform names of paging inputs, as GraphQL's connection arguments call them.
_ARGUMENTS = {"limit": "first", "cursor": "after"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def graphql_field(path: str) -> str:
    """``customers[2].last_name`` as GraphQL names it: ``customers[2].lastName``. A custom
    field keeps the name its tenant gave it: ``custom_fields.signed_at`` is
    ``customFields.signed_at``."""
    parts = path.split(".")
    return ".".join(
        part if place and parts[place - 1] == CUSTOM_FIELDS else _graphql_part(part)
        for place, part in enumerate(parts)
    )


def _graphql_part(part: str) -> str:
    return _camel(part) if "[" in part else _ARGUMENTS.get(part, _camel(part))


_VARIABLE = re.compile(r"^Variable '\$(?P<name>\w+)' (?:got|has) invalid value")
_MISSING_FIELD = re.compile(r"required field '(?P<field>\w+)'")
_VARIABLE_PATH = re.compile(r" at '?\.?(?P<path>[\w\[\].]+?)'?[:;]")


def _variable_field(message: str) -> str | None:
    """The input field a variable error names: ``customers[1].lastName`` within the variable
    ``$input``; an item of a list variable after the variable (``operations[1].data.lastName``
    in ``$operations``, as a batch's own errors name it); a scalar variable names itself; None
    for any other message."""
    variable = _VARIABLE.match(message)
    if variable is None:
        return None
    path = _VARIABLE_PATH.search(message)
    field = path["path"] if path else ""
    if field.startswith(variable["name"] + "."):
        field = field.split(".", 1)[1]
    elif field.startswith("["):
        field = variable["name"] + field
    missing = _MISSING_FIELD.search(message)
    if missing is not None:
        field = f"{field}.{missing['field']}" if field else missing["field"]
    return field or variable["name"]


def _field_errors(errors: tuple[FieldError, ...]) -> list[dict[str, str]]:
    return [
        {
            "field": graphql_field(error.field),
            "code": error.code,
            "message": _in_graphql_terms(error.message, errors),
        }
        for error in errors
    ]


def _in_graphql_terms(message: str, errors: tuple[FieldError, ...]) -> str:
    """``message`` naming the fields of ``errors`` as GraphQL does (``limit`` is ``first``)."""
    for field_error in errors:
        message = message.replace(field_error.field, graphql_field(field_error.field))
    return message


def message_of(error: DomainError) -> str:
    """A platform error's detail, naming the fields it names as GraphQL does."""
    if isinstance(error, Invalid):
        return _in_graphql_terms(error.detail, error.errors)
    return error.detail


def field_errors_of(error: DomainError) -> list[dict[str, str]]:
    """``[{field, code, message}]`` of a validation error, fields as GraphQL names them; none for
    any other error."""
    return _field_errors(error.errors) if isinstance(error, Invalid) else []


def failures_of(rejected: BatchRejected) -> list[dict[str, Any]]:
    """Each failed operation of a rejected (atomic) batch: its index and its error, shaped as a
    result of a batch that is not atomic shows it."""
    return [
        {
            "index": index,
            "code": failure.code,
            "message": message_of(failure),
            "errors": field_errors_of(failure),
        }
        for index, failure in rejected.failures
    ]


class DomainErrors(SchemaExtension):
    """A platform error keeps its message and gains its code (and fields); an unexpected one is
    logged with the request id and shown as INTERNAL, its details never leaving the server."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is not None and result.errors:
            result.errors = [self._mapped(error) for error in result.errors]

    def _mapped(self, error: GraphQLError) -> GraphQLError:
        return mapped_error(error, getattr(self.execution_context.context, "request_id", ""))


def mapped_error(error: GraphQLError, request_id: str) -> GraphQLError:
    """``error`` with its code (and fields) in its extensions, as ``DomainErrors`` answers it;
    the live transports map each result of a subscription with it."""
    original = error.original_error
    extensions: dict[str, Any]
    variable_field = _variable_field(error.message)
    if variable_field is not None:
        # A variable GraphQL could not coerce to its type: an input error, as REST's 422.
        message = error.message
        extensions = {
            "code": Invalid.code,
            "errors": [{"field": variable_field, "code": "invalid", "message": message}],
        }
    elif isinstance(original, InvalidOperationTypeError):
        extensions = {"code": NOT_A_SUBSCRIPTION}
        kind = original.operation_type.value
        message = f"Only subscriptions are served here: send a {kind} to POST /graphql."
    elif original is None or isinstance(original, GraphQLError):
        # GraphQL's own: syntax, validation, guards
        extensions = {"code": INVALID_QUERY, **(error.extensions or {})}
        message = error.message
    elif isinstance(original, DomainError):
        extensions = {"code": original.code}
        message = message_of(original)
        if isinstance(original, RateLimited | Unavailable) and original.retry_after_seconds:
            extensions["retry_after_seconds"] = original.retry_after_seconds
        if isinstance(original, Invalid):
            extensions["errors"] = field_errors_of(original)
        if isinstance(original, BatchRejected):
            extensions["failures"] = failures_of(original)
    else:
        log.error("graphql_unhandled_error", exc_info=original, request_id=request_id)
        extensions = {"code": INTERNAL, "request_id": request_id}
        message = "Internal error; the request id identifies it to support."
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions=extensions,
    )
