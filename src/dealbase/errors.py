"""The one error taxonomy of dealbase.

Services and the tenancy layer raise these; each API maps them to its wire form once
(``edge.problems`` to RFC 9457 problem details, GraphQL to ``extensions.code``). ``code`` is
part of the public contract: clients branch on it, so a code never changes meaning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class FieldError:
    """One offending input field: ``field`` is a dotted path such as ``customers[2].last_name``."""

    field: str
    code: str
    message: str

    @property
    def pointer(self) -> str:
        """The same location as an RFC 6901 JSON pointer into the request body."""
        parts = self.field.replace("[", ".").replace("]", "").split(".") if self.field else []
        return (
            "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts) if parts else ""
        )


class DomainError(Exception):
    """Base of every error a client can cause; never raised for a bug of ours."""

    code: ClassVar[str] = "error"
    title: ClassVar[str] = "Error"

    def __init_subclass__(cls, *, code: str = "", title: str = "", **kwargs: Any) -> None:
        """A kind of error declares its ``code`` and its ``title`` (else its base's) in its
        class statement: ``class NotFound(DomainError, code="not_found", title="Not found")``."""
        super().__init_subclass__(**kwargs)
        if code:
            cls.code = code
        if title:
            cls.title = title

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthenticated(DomainError, code="unauthenticated", title="Unauthenticated"): ...


class Forbidden(DomainError, code="forbidden", title="Forbidden"): ...


class TenantSuspended(Forbidden, code="tenant_suspended", title="Tenant suspended"):
    """A valid key of a tenant an operator has suspended: its data is kept, its keys refused."""


class NotFound(DomainError, code="not_found", title="Not found"): ...


class Conflict(DomainError, code="conflict", title="Conflict"): ...


class ExternalIdTaken(Conflict, code="external_id_taken", title="External id taken"):
    """Another record of the same kind in the department already has the external id."""


class ValueTaken(Conflict, code="value_taken", title="Value taken"):
    """Another record of the same kind in the department already has the value of a unique
    custom field."""


class FieldNameTaken(Conflict, code="field_name_taken", title="Field name taken"):
    """The record already has a custom field of that name."""


class FieldLimitReached(Conflict, code="field_limit_reached", title="Field limit reached"):
    """The record has as many custom fields as it may."""


class ValuesNotUnique(Conflict, code="values_not_unique", title="Values not unique"):
    """A field cannot become unique: records of one department share a value of it."""


class FieldNotArchived(Conflict, code="field_not_archived", title="Field not archived"):
    """A field is deleted, with its values, only once archived."""


class PreconditionFailed(DomainError, code="precondition_failed", title="Precondition failed"): ...


class Unavailable(DomainError, code="service_unavailable", title="Service unavailable"):
    """A dependency the request needs is down or too slow (the database; Redis, when rate
    limits are set to fail closed): the same request may succeed later, after
    ``retry_after_seconds`` when given."""

    def __init__(self, detail: str, *, retry_after_seconds: int | None = None) -> None:
        super().__init__(detail)
        self.retry_after_seconds = retry_after_seconds


class DatabaseUnavailable(Unavailable, code="database_unavailable"):
    """PostgreSQL could not be reached, or a connection to it broke, or it refused the work for
    a reason that passes (shutting down, too many connections, a deadlock)."""


class DatabaseTimeout(Unavailable, code="database_timeout", title="Database timeout"):
    """A statement ran past the statement timeout, or waited for a lock past the lock timeout."""


class RateLimited(DomainError, code="rate_limited", title="Too many requests"):
    def __init__(self, detail: str, *, retry_after_seconds: int) -> None:
        super().__init__(detail)
        self.retry_after_seconds = retry_after_seconds


class Invalid(DomainError, code="validation_failed", title="Validation failed"):
    """Input that breaks a rule; ``errors`` names every offending field."""

    def __init__(self, detail: str, errors: Iterable[FieldError] = ()) -> None:
        super().__init__(detail)
        self.errors = tuple(errors)

    @classmethod
    def of(cls, field_name: str, code: str, message: str) -> Invalid:
        return cls(message, [FieldError(field_name, code, message)])

    @classmethod
    def unknown_references(cls, fields: Sequence[str], owner: str) -> Invalid:
        """Ids in a body (``step_id``, ``customer_id``...) naming nothing in ``owner``."""
        return cls(
            f"The request names ids that do not exist here: {', '.join(fields)}.",
            [
                FieldError(
                    name, "not_found", f"No {name.removesuffix('_id')} of {owner} has this id."
                )
                for name in fields
            ],
        )

    def within(self, path: str) -> Invalid:
        """The same error with every field named from ``path`` (an operation of a batch)."""
        return Invalid(
            self.detail,
            [
                FieldError(
                    f"{path}.{error.field}" if error.field else path, error.code, error.message
                )
                for error in self.errors
            ],
        )


class BatchRejected(DomainError, code="batch_rejected", title="Batch rejected"):
    """An all-or-nothing batch of which operations failed: nothing of it was written.
    ``failures`` pairs each failed operation's index with its own error."""

    def __init__(self, detail: str, failures: Sequence[tuple[int, DomainError]]) -> None:
        super().__init__(detail)
        self.failures = tuple(failures)


# Pydantic's error types, folded into the codes documented in docs/api.md.
_PYDANTIC_CODES: dict[str, str] = {
    "missing": "missing",
    "extra_forbidden": "unknown_field",
    "string_too_long": "too_long",
    "string_too_short": "blank",
    "too_long": "too_many_items",
    "too_short": "too_few_items",
    "greater_than_equal": "out_of_range",
    "less_than_equal": "out_of_range",
    "greater_than": "out_of_range",
    "less_than": "out_of_range",
    "date_from_datetime_parsing": "invalid_date",
    "date_from_datetime_inexact": "invalid_date",
    "date_parsing": "invalid_date",
    "date_type": "invalid_date",
    "datetime_parsing": "invalid_datetime",
    "datetime_from_date_parsing": "invalid_datetime",
    "datetime_type": "invalid_datetime",
    "timezone_aware": "invalid_datetime",
    "uuid_parsing": "invalid_id",
    "uuid_type": "invalid_id",
    "enum": "invalid_choice",
    "literal_error": "invalid_choice",
    "string_pattern_mismatch": "invalid_format",
    "value_error": "invalid",
    # Raised by our own validators under these names (platform/validation.py,
    # platform/custom_fields/values.py).
    "blank": "blank",
    "invalid_character": "invalid_character",
    "invalid_format": "invalid_format",
    "out_of_range": "out_of_range",
    "cannot_clear": "cannot_clear",
    "duplicate_item": "duplicate_item",
    "not_an_option": "not_an_option",
    "unknown_field": "unknown_field",
    "invalid_choice": "invalid_choice",
    "invalid_datetime": "invalid_datetime",
}


def field_path(location: Iterable[str | int]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def invalid_from_pydantic(errors: Iterable[Any], *, prefix: Sequence[str | int] = ()) -> Invalid:
    """Turns pydantic's ``ValidationError.errors()`` into one ``Invalid`` naming every field."""
    field_errors = []
    for error in errors:
        kind = str(error["type"])
        code = _PYDANTIC_CODES.get(kind)
        if code is None:
            code = (
                "wrong_type" if kind.endswith("_type") or kind.endswith("_parsing") else "invalid"
            )
        message = str(error["msg"])
        field_errors.append(FieldError(field_path([*prefix, *error["loc"]]), code, message))
    names = ", ".join(sorted({e.field or "(body)" for e in field_errors}))
    return Invalid(f"The request has invalid fields: {names}.", field_errors)
