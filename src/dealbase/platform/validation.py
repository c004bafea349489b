"""Field rules shared by every input model, so REST and GraphQL validate alike."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Optional, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from dealbase.platform.errors import Invalid, invalid_from_pydantic
from dealbase.tenancy.scope import Scope


# PostgreSQL text cannot hold U+0000; refusing it here turns a would-be 500 into a 422.
def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError(
            "invalid_character", "must not contain the NUL character (U+0000)"
        )
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be empty or only white space")
    return value


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


def _email_shape(value: str) -> str:
    if not _EMAIL.match(value):
        raise PydanticCustomError("invalid_format", "must look like name@domain")
    return value


SHORT_TEXT = 255
LONG_TEXT = 10_000

ShortText = Annotated[str, Field(max_length=SHORT_TEXT), AfterValidator(_no_nul)]
RequiredShortText = Annotated[
    str,
    Field(min_length=1, max_length=SHORT_TEXT),
    AfterValidator(_no_nul),
    AfterValidator(_not_blank),
]
LongText = Annotated[str, Field(max_length=LONG_TEXT), AfterValidator(_no_nul)]
UrlText = Annotated[str, Field(max_length=2048), AfterValidator(_no_nul)]
PhoneText = Annotated[str, Field(max_length=64), AfterValidator(_no_nul)]
EmailText = Annotated[
    str, Field(max_length=320), AfterValidator(_no_nul), AfterValidator(_email_shape)
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
    """``model`` from Python values (CLI, GraphQL), with failures as ``Invalid`` like REST's."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_from_pydantic(exc.errors(include_url=False)) from None


def refuse_null(value: object, info: ValidationInfo) -> object:
    """A ``mode="before"`` field validator: the field may be changed, never set to null."""
    if value is None:
        raise PydanticCustomError(
            "cannot_clear", "{field} is required and cannot be cleared", {"field": info.field_name}
        )
    return value


def _with_metadata(annotation: Any, metadata: list[Any]) -> Any:
    return Annotated[(annotation, *metadata)] if metadata else annotation


def partial(model: type[BaseModel], name: str) -> type[BaseModel]:
    """``model`` for PATCH: every field optional, where an absent field stays as it is and
    ``null`` clears it; a field ``model`` requires may be changed but never cleared."""
    fields: dict[str, Any] = {
        field_name: (Optional[_with_metadata(info.annotation, info.metadata)], None)  # noqa: UP045
        for field_name, info in model.model_fields.items()
    }
    required = [n for n, info in model.model_fields.items() if info.is_required()]
    validators = (
        {"refuse_null": field_validator(*required, mode="before")(refuse_null)} if required else {}
    )
    return create_model(name, __config__=model.model_config, __validators__=validators, **fields)
