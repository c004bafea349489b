"""Field rules shared by every input model, so REST and GraphQL validate alike."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from types import NoneType, UnionType
from typing import Annotated, Any, Optional, TypeVar, Union, get_args, get_origin

import orjson
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from dealbase.errors import Invalid, invalid_from_pydantic
from dealbase.tenancy.scope import Scope


class ClientInput(BaseModel):
    """What a client sends (a body, a list's filters): each value of its field's type, with no
    conversion; a field the model does not know is refused; frozen once validated."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# PostgreSQL text cannot hold U+0000; refusing it here turns a would-be 500 into a 422.
def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError(
            "invalid_character", "must not contain the NUL character (U+0000)"
        )
    return value


# Rules stated twice, to the letter: as JSON-Schema patterns (ECMA-262) in the OpenAPI document,
# and checked here with the same patterns. White space is spelled out, since Python's \s and
# ECMA's differ (Python's also takes U+001C to U+001F and U+0085).
_SPACE = r"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
NO_NUL_PATTERN = r"^[^\u0000]*$"
_NOT_BLANK_PATTERN = rf"^[^\u0000]*[^{_SPACE}\u0000][^\u0000]*$"
_EMAIL_PATTERN = rf"^[^@{_SPACE}\u0000]+@[^@{_SPACE}\u0000]+$"
_NOT_BLANK = re.compile(rf"[^{_SPACE}]")
_EMAIL = re.compile(rf"^[^@{_SPACE}]+@[^@{_SPACE}]+$")


def _not_blank(value: str) -> str:
    if not _NOT_BLANK.search(value):
        raise PydanticCustomError("blank", "must not be empty or only white space")
    return value


def _email_shape(value: str) -> str:
    if not _EMAIL.fullmatch(value):
        raise PydanticCustomError("invalid_format", "must look like name@domain")
    return value


def _text(max_length: int, pattern: str = NO_NUL_PATTERN) -> Any:
    return Field(max_length=max_length, json_schema_extra={"pattern": pattern})


def text_of(max_length: int) -> Any:
    """Text of at most ``max_length`` characters, without U+0000 (a text custom field's)."""
    return Annotated[str, _text(max_length), AfterValidator(_no_nul)]


# A record's ``custom_fields`` as a body carries it: judged field by field by the tenant's
# definitions (``custom_fields.values``), which allow a record kind at most this many.
CUSTOM_FIELDS_PER_RECORD = 50
CustomFieldValues = Annotated[
    dict[str, Any],
    Field(
        max_length=CUSTOM_FIELDS_PER_RECORD,
        description="The tenant's custom fields of the record, by name (GET /custom-fields):"
        " each of its field's type, or null.",
    ),
]

# Any text bound for SQL, search terms included, is refused with U+0000 in it.
PlainText = Annotated[str, AfterValidator(_no_nul)]

SHORT_TEXT = 255
LONG_TEXT = 10_000
# RFC 5321's bound on a path: 64 characters of local part, @, 255 of domain.
EMAIL_MAX_LENGTH = 320
EXTERNAL_ID_MAX_LENGTH = 255

ShortText = Annotated[str, _text(SHORT_TEXT), AfterValidator(_no_nul)]
RequiredShortText = Annotated[
    str,
    _text(SHORT_TEXT, _NOT_BLANK_PATTERN),
    Field(min_length=1),
    AfterValidator(_no_nul),
    AfterValidator(_not_blank),
]
LongText = Annotated[str, _text(LONG_TEXT), AfterValidator(_no_nul)]
UrlText = Annotated[str, _text(2048), AfterValidator(_no_nul)]
PhoneText = Annotated[str, _text(64), AfterValidator(_no_nul)]
EmailText = Annotated[
    str,
    _text(EMAIL_MAX_LENGTH, _EMAIL_PATTERN),
    AfterValidator(_no_nul),
    AfterValidator(_email_shape),
]


_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


def _rfc3339_text(value: object) -> object:
    # Pydantic alone also reads 0, "0.5" or "1700000000" as Unix times; the wire says RFC 3339.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise PydanticCustomError(
            "invalid_datetime",
            "must be an RFC 3339 date-time with a UTC offset, e.g. 2026-11-21T09:30:00Z",
        )
    return value


def _representable_in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError(
            "out_of_range", "must lie between the years 1 and 9999 in UTC"
        ) from None


# A moment with its UTC offset (a naive time is refused), stored and returned in UTC.
# Lax inside: once the text has passed the RFC 3339 check, pydantic may parse it from a string.
Moment = Annotated[
    AwareDatetime,
    Strict(False),
    BeforeValidator(_rfc3339_text),
    AfterValidator(_representable_in_utc),
]

# A client's own id for a record: the characters a URL path segment carries as they are
# (RFC 3986 unreserved and sub-delimiters, ':' and '@'), so that
# /customers/by-external-id/{external_id} needs no escaping. Not starting with ".", so that it
# is never the path step "." or "..".
EXTERNAL_ID_PATTERN = (
    r"^[A-Za-z0-9_~:@!$&'()*+,;=-][A-Za-z0-9._~:@!$&'()*+,;=-]"
    f"{{0,{EXTERNAL_ID_MAX_LENGTH - 1}}}$"
)
_EXTERNAL_ID = re.compile(EXTERNAL_ID_PATTERN)
_EXTERNAL_ID_RULE = (
    f"must be 1 to {EXTERNAL_ID_MAX_LENGTH} letters, digits or - . _ ~ : @ ! $ & ' ( ) * + , ; =,"
    " not starting with ."
)


def _external_id_shape(value: str) -> str:
    if not _EXTERNAL_ID.fullmatch(value):
        raise PydanticCustomError(
            "invalid_format",
            _EXTERNAL_ID_RULE,
        )
    return value


def valid_external_id(value: str, field: str = "external_id") -> str:
    """An external id from a path or an argument, judged as ExternalId judges a body's."""
    if not _EXTERNAL_ID.fullmatch(value):
        raise Invalid.of(
            field,
            "invalid_format",
            _EXTERNAL_ID_RULE,
        )
    return value


ExternalId = Annotated[
    str,
    Field(
        max_length=EXTERNAL_ID_MAX_LENGTH,
        json_schema_extra={"pattern": EXTERNAL_ID_PATTERN},
        description="The client's own id for the record, unique in the department"
        " among records of its kind; case-sensitive.",
    ),
    AfterValidator(_external_id_shape),
]

# Money as a whole number of the tenant's currency units, as the document's integer ``volume``.
Volume = Annotated[int, Field(ge=0, le=2**63 - 1)]


def department_of(scope: Scope) -> uuid.UUID:
    """The department a department-bound operation acts in."""
    if scope.department_id is None:
        raise Invalid.of("department_id", "missing", "This operation needs a department.")
    return scope.department_id


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: dict[str, Any]) -> M:
    """``model`` from Python values (query strings, CLI, GraphQL), by exactly the rules a JSON
    body meets: the values go through JSON, so a date-time or an id is read from its text."""
    try:
        text = orjson.dumps(data)
    except orjson.JSONEncodeError:  # a str with an unpaired surrogate: not Unicode text
        raise Invalid.of(
            "", "invalid_character", "Text must be Unicode: no unpaired surrogates."
        ) from None
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise invalid_from_pydantic(exc.errors(include_url=False)) from None


def _refuse_null(value: object, info: ValidationInfo) -> object:
    """A ``mode="before"`` field validator: the field may be changed, never set to null."""
    if value is None:
        raise PydanticCustomError(
            "cannot_clear", "{field} is required and cannot be cleared", {"field": info.field_name}
        )
    return value


def _with_metadata(annotation: Any, metadata: list[Any]) -> Any:
    return Annotated[(annotation, *metadata)] if metadata else annotation


def _admits_null(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, UnionType) and NoneType in get_args(annotation)


def partial(model: type[BaseModel], name: str) -> type[BaseModel]:
    """``model`` for PATCH: every field optional, where an absent field stays as it is and
    ``null`` clears it; a field ``model`` requires, or one it never takes as null (a flag with a
    default), may be changed but never cleared."""
    required = [
        n
        for n, info in model.model_fields.items()
        if info.is_required() or not _admits_null(info.annotation)
    ]
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        metadata = list(info.metadata)
        if info.json_schema_extra is not None:
            metadata.append(Field(json_schema_extra=info.json_schema_extra))
        annotation = _with_metadata(info.annotation, metadata)
        # A required field stays non-nullable in the schema: null is refused below.
        fields[field_name] = (annotation if field_name in required else Optional[annotation], None)  # noqa: UP045
    validators = (
        {"refuse_null": field_validator(*required, mode="before")(_refuse_null)} if required else {}
    )
    return create_model(name, __config__=model.model_config, __validators__=validators, **fields)
