"""A list's filters on a tenant's custom fields: query parameters ``custom_fields.<name>``
(equality; for a select, any of its comma-separated option ids), ``custom_fields.<name>.gte``
and ``.lte`` (a number's, a date's or a moment's range), on the fields that have an index (unique
or filterable): a filter scans no more of the table than an indexed column lets it. GraphQL's
lists take the same filters as JSON, named without the prefix (``named_as_parameters``).

They are judged by a filter model made for the tenant's fields (the record's own filter model
with one field a parameter), which a list's cursor also fingerprints, and become conditions on
the fields' columns added to the list's statement (``narrowed``, or ``conditions`` for a
statement built around them: GraphQL's compiled reads).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, create_model
from sqlalchemy import ColumnElement, Select, bindparam, column

from dealbase.db.statements import built_once
from dealbase.errors import FieldError, Invalid, invalid_from_pydantic
from dealbase.platform.custom_fields.models import OPTIONS_LIMIT, CustomField, FieldType
from dealbase.platform.custom_fields.rules import column_name
from dealbase.platform.custom_fields.values import (
    COLUMN_TYPES,
    OptionIds,
    json_text,
    value_type,
)
from dealbase.platform.shapes import CUSTOM_FIELDS

PREFIX = f"{CUSTOM_FIELDS}."
RANGES = frozenset({FieldType.INTEGER, FieldType.DECIMAL, FieldType.DATE, FieldType.TIMESTAMP})
_BOUNDS = (("gte", ">="), ("lte", "<="))


def _comma_separated(value: object) -> object:
    return value.split(",") if isinstance(value, str) else value


# A select's filter: any of these option ids.
_OPTIONS = Annotated[
    list[uuid.UUID],
    BeforeValidator(_comma_separated),
    Field(min_length=1, max_length=OPTIONS_LIMIT, strict=False),
]


@dataclass(frozen=True)
class _Filter:
    """One filter parameter: the field it is of, and its comparison."""

    field: CustomField
    comparison: str  # "=", ">=", "<=", "any" (a single select's), "overlap" (a multi select's)


def named_as_parameters(given: Mapping[str, object]) -> dict[str, object]:
    """Filters named without the parameters' prefix (``seats.gte``: a GraphQL filter's
    ``customFields``), by their parameters' names (``custom_fields.seats.gte``)."""
    return {f"{PREFIX}{name}": value for name, value in given.items()}


def _parameter_name(field_name: str, bound: str | None = None) -> str:
    return f"{PREFIX}{field_name}" if bound is None else f"{PREFIX}{field_name}.{bound}"


def _attribute(parameter: str) -> str:
    """The filter model's attribute of a parameter (a Python identifier)."""
    return "cf__" + parameter.removeprefix(PREFIX).replace(".", "__")


@dataclass(frozen=True)
class CustomFilters:
    """The filters a record's lists take on the tenant's indexed custom fields."""

    fields: tuple[CustomField, ...]
    by_attribute: Mapping[str, _Filter] = field(init=False)
    # Each parameter's type, by its attribute.
    _typed: Mapping[str, Any] = field(init=False)
    # The record's filter model with the custom ones, by the record's.
    _models: dict[type[BaseModel], type[BaseModel]] = field(default_factory=dict, compare=False)
    # The statements the conditions of some given filters complete.
    _completed: dict[tuple[Select[Any], frozenset[str]], Select[Any]] = field(
        default_factory=dict, compare=False
    )

    def __post_init__(self) -> None:
        typed: dict[str, Any] = {}
        filters: dict[str, _Filter] = {}
        for each in self.fields:
            if not (each.unique or each.filterable):
                continue
            for parameter, comparison, kind in _parameters(each):
                attribute = _attribute(parameter)
                typed[attribute] = (kind | None, Field(None, validation_alias=parameter))
                filters[attribute] = _Filter(each, comparison)
        object.__setattr__(self, "by_attribute", filters)
        object.__setattr__(self, "_typed", typed)

    def _model(self, base: type[BaseModel]) -> type[BaseModel]:
        found = self._models.get(base)
        if found is None:
            found = self._models[base] = create_model(
                f"{base.__name__}WithCustomFields", __base__=base, **self._typed
            )
        return found

    def judged(self, filters: BaseModel, given: Mapping[str, object]) -> BaseModel:
        """``filters`` with the custom ones ``given`` (by their parameters' names), judged: else
        Invalid naming each bad parameter (an unknown field, one without an index, a value not
        of its type). A value is a query parameter's text, or JSON's (a GraphQL filter's): a
        number, a boolean or a string, and for a select a list of option ids; each is read as
        its field's type, the same way whichever it is."""
        if not given:
            return filters
        indexed = {each.name for each in self.fields if each.unique or each.filterable}
        known = {each.name for each in self.fields}
        errors = [
            FieldError(
                name,
                "not_filterable",
                "Only a unique or filterable field filters a list: mark it filterable.",
            )
            for name in given
            if (field_name := name.removeprefix(PREFIX).split(".")[0]) in known
            and field_name not in indexed
        ]
        if errors:
            raise Invalid("The request has invalid filters.", errors)
        values = {**filters.model_dump(mode="json", exclude_none=True), **given}
        try:
            return self._model(type(filters)).model_validate_json(json_text(values))
        except ValidationError as exc:
            raise invalid_from_pydantic(exc.errors(include_url=False)) from None

    def values(self, filters: BaseModel) -> dict[str, Any]:
        """The given custom filters' values, by their parameters' bound names: as JSON's text
        and numbers, as a record's custom values are bound (``CustomValues.columns``)."""
        given = {attribute for attribute in self.by_attribute if hasattr(filters, attribute)}
        return filters.model_dump(mode="json", include=given, exclude_none=True)

    def narrowed(self, statement: Select[Any], given: frozenset[str]) -> Select[Any]:
        """``statement`` (a list's page, or its count) with the ``conditions`` of the ``given``
        filters (their attributes)."""
        if not given:
            return statement
        key = (statement, given)
        found = self._completed.get(key)
        if found is None:
            found = self._completed[key] = built_once(statement.where(*self.conditions(given)))
        return found

    def conditions(self, given: frozenset[str]) -> tuple[ColumnElement[bool], ...]:
        """The conditions of the ``given`` filters (their attributes), each value bound by its
        attribute: on the fields' columns by name alone, which only the record's table has."""
        return tuple(self._condition(attribute) for attribute in sorted(given))

    def kinds(self, given: frozenset[str]) -> Hashable:
        """What tells the ``conditions`` of the ``given`` filters from those of other filters
        or of another tenant's fields: each one's attribute and its field's type."""
        return tuple(
            (attribute, self.by_attribute[attribute].field.type) for attribute in sorted(given)
        )

    def _condition(self, attribute: str) -> ColumnElement[bool]:
        each = self.by_attribute[attribute]
        kind = COLUMN_TYPES[each.field.type]
        held = column(column_name(each.field.name), kind)
        if each.comparison == "any":
            return held == bindparam(attribute, type_=OptionIds()).any_()
        if each.comparison == "overlap":
            return held.op("&&")(bindparam(attribute, type_=OptionIds()))
        return held.op(each.comparison)(bindparam(attribute, type_=kind))


def _parameters(each: CustomField) -> list[tuple[str, str, Any]]:
    """Each filter parameter of a field: its name, its comparison, the type of its value."""
    if each.type is FieldType.SINGLE_SELECT:
        return [(_parameter_name(each.name), "any", _OPTIONS)]
    if each.type is FieldType.MULTI_SELECT:
        return [(_parameter_name(each.name), "overlap", _OPTIONS)]
    # A query's values are text: each is read as its field's type (strict=False).
    kind: Any = Annotated[value_type(each), Field(strict=False)]
    equal = [(_parameter_name(each.name), "=", kind)]
    if each.type not in RANGES:
        return equal
    return equal + [(_parameter_name(each.name, bound), sign, kind) for bound, sign in _BOUNDS]
