from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

from dealbase.errors import DomainError, Invalid
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.platform.validation import ClientInput, ExternalId, valid_external_id
from dealbase.platform.versioning import Expected

MAX_OPERATIONS = 1_000

Fields = TypeVar("Fields", bound=BaseModel)
Record = TypeVar("Record")


UpsertKey = Annotated[
    str,
    Field(
        max_length=len(CUSTOM_FIELDS) + 1 + 48,
        pattern=rf"^{CUSTOM_FIELDS}\.[a-z][a-z0-9_]*$",
        description="upsert: name the record by this unique custom field"
        " (`custom_fields.<name>`), whose value `data` gives, instead of by `external_id`."
        " Every upsert of a batch names its records the same way.",
    ),
]


class Operation(ClientInput):
    """One operation of a batch. ``data`` is judged on its own, so that one bad record fails
    only its operation (unless the batch is atomic)."""

    op: Literal["create", "upsert"]
    external_id: ExternalId | None = Field(
        default=None,
        description="upsert: the record to create or update (or `upsert_key`). create: not"
        " used (a new record's external id goes in `data`).",
    )
    upsert_key: UpsertKey | None = None
    data: dict[str, Any] = Field(description="The record's fields, as its create operation takes.")

    @model_validator(mode="after")
    def _external_id_where_it_belongs(self) -> Operation:
        if self.op == "upsert" and self.external_id is None and self.upsert_key is None:
            raise PydanticCustomError(
                "missing", "an upsert names the record's external_id (or its upsert_key)"
            )
        if self.op == "upsert" and self.external_id is not None and self.upsert_key is not None:
            raise PydanticCustomError(
                "unknown_field", "an upsert names its record by external_id or upsert_key"
            )
        if self.op == "create" and (self.external_id, self.upsert_key) != (None, None):
            raise PydanticCustomError(
                "unknown_field", "a create carries its external id in data.external_id"
            )
        return self


class Batch(ClientInput):
    operations: Annotated[list[Operation], Field(min_length=1, max_length=MAX_OPERATIONS)]

    @model_validator(mode="after")
    def _one_way_of_naming_records(self) -> Batch:
        keys = {operation.upsert_key for operation in self.operations if operation.op == "upsert"}
        if len(keys) > 1:
            raise PydanticCustomError(
                "mismatch", "every upsert of a batch names its record the same way"
            )
        return self

    @property
    def upsert_key(self) -> str | None:
        """The unique custom field its upserts name their records by (None: external ids)."""
        return next((each.upsert_key for each in self.operations if each.upsert_key), None)


@dataclass(frozen=True, slots=True)
class Write(Generic[Fields]):
    """An operation whose data passed its model: what a resource's service applies.

    ``given`` names the fields the data carried: an upsert that finds the record changes only
    those. ``expected`` and ``unless`` are a single upsert's If-Match and If-None-Match: the
    record must exist at a version ``expected`` admits, and must not exist at one ``unless``
    admits (``If-None-Match: *``: must not exist)."""

    index: int
    upsert: bool
    external_id: str | None
    fields: Fields
    given: frozenset[str]
    expected: Expected | None = None
    unless: Expected | None = None


def given_fields(fields: BaseModel) -> frozenset[str]:
    """The fields ``fields`` were given, but the external id: custom ones by their columns (a
    model fitted to the tenant's custom fields dumps them so)."""
    given = fields.model_fields_set - {"external_id"}
    if CUSTOM_FIELDS in given:
        given = set(fields.model_dump(exclude_unset=True)) - {"external_id", CUSTOM_FIELDS}
    return frozenset(given)


def upserted_fields(fields: Fields, external_id: str) -> Fields:
    """A single upsert's body with the external id its path (or argument) names, which the
    body may repeat but not contradict."""
    valid_external_id(external_id)
    given = getattr(fields, "external_id", None)
    if given is not None and given != external_id:
        raise Invalid.of(
            "external_id", "mismatch", "external_id must be the one the operation names, or absent."
        )
    return fields.model_copy(update={"external_id": external_id})


def single_upsert(
    external_id: str, fields: Fields, expected: Expected | None, unless: Expected | None
) -> Write[Fields]:
    """A single upsert (PUT by external id, a GraphQL upsert) as a write: the fields its body
    gave, the external id its path names (``upserted_fields``), its If-Match and
    If-None-Match."""
    given = given_fields(fields)
    return Write(
        0, True, external_id, upserted_fields(fields, external_id), given, expected, unless
    )


Outcome = Literal["created", "updated", "unchanged", "failed"]


@dataclass(frozen=True, slots=True)
class Result(Generic[Record]):
    """What became of one operation: the record as it now is, or the operation's error."""

    outcome: Outcome
    record: Record | None = None
    error: DomainError | None = None

    @staticmethod
    def failed(error: DomainError) -> Result[Any]:
        return Result("failed", None, error)
