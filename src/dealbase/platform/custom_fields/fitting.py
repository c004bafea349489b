"""A synced record fitted to a tenant's custom fields (``fitted``): the same verbs over its table
with their columns, its JSON with ``custom_fields``, its read model with their values and its
fields models typing them. A tenant without fields of the record gets the record itself, its
models typed to refuse any ``custom_fields`` key."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import Select, Table, bindparam, func, select

from dealbase.db.statements import Kept, Record, built_once
from dealbase.db.units import UnitOfWork
from dealbase.errors import Invalid, invalid_from_pydantic
from dealbase.platform.custom_fields.definitions import DEFINITIONS
from dealbase.platform.custom_fields.filters import CustomFilters
from dealbase.platform.custom_fields.models import CustomField
from dealbase.platform.custom_fields.rules import column_name
from dealbase.platform.custom_fields.values import (
    extended_shape,
    extended_table,
    input_models,
    json_text,
    values_model,
    values_of_row,
)
from dealbase.platform.pagination import PageRequest
from dealbase.platform.record_writes import InBulk, OneByOne
from dealbase.platform.shapes import CUSTOM_FIELDS, Shape

if TYPE_CHECKING:
    from dealbase.platform.records import Completed, Listing, SyncedRecord

R = TypeVar("R", bound="SyncedRecord[Any, Any, Any]")


@dataclass(frozen=True)
class CustomValues:
    """A fitted record's custom fields: their values as one write gives them, and as a row
    holds them."""

    fields: tuple[CustomField, ...]
    # ``custom_fields``' object of a create (required fields given) and of a change.
    of_create: type[BaseModel]
    of_change: type[BaseModel]
    # The record's table with their columns (None: it has none).
    table: Table | None
    # The values of a record by id, as ``values`` reads them.
    by_ids: Select[Any] | None
    # The filters its lists take on them.
    filters: CustomFilters
    # ``completed``'s statements, by the statement they complete.
    _completed: dict[Select[Any], Select[Any]] = field(default_factory=dict, compare=False)

    @functools.cached_property
    def columns_of_fields(self) -> tuple[str, ...]:
        return tuple(column_name(field.name) for field in self.fields)

    @property
    def required(self) -> bool:
        return any(field.required for field in self.fields)

    def unique_column(self, upsert_key: str) -> str:
        """The column of the unique field ``upsert_key`` names (``custom_fields.<name>``): else
        Invalid naming ``upsert_key``."""
        name = upsert_key.removeprefix(f"{CUSTOM_FIELDS}.")
        found = next((field for field in self.fields if field.name == name), None)
        if found is None or not found.unique:
            raise Invalid.of(
                "upsert_key",
                "not_unique" if found else "not_found",
                f"{upsert_key} is not a unique custom field of the record.",
            )
        return column_name(name)

    def columns(self, given: Mapping[str, Any] | None, *, change: bool) -> dict[str, Any]:
        """The columns of ``custom_fields``' object ``given`` (None: none given), judged by the
        fields' rules: else Invalid, every bad field named under ``custom_fields``."""
        if given is None and change:
            return {}
        model = self.of_change if change else self.of_create
        try:
            judged = model.model_validate_json(json_text(given or {}))
        except ValidationError as exc:
            raise invalid_from_pydantic(
                exc.errors(include_url=False), prefix=(CUSTOM_FIELDS,)
            ) from None
        # As JSON's text and numbers, which PostgreSQL reads by each column's type: the driver
        # then needs no dumper of its own for a date, a moment, a decimal or a UUID.
        columns: dict[str, Any] = judged.model_dump(
            mode="json", exclude_unset=change, by_alias=True
        )
        return columns

    def values(self, uow: UnitOfWork, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        """The custom values of the records of ``ids``, by id."""
        return {key: values_of_row(self.fields, row) for key, row in self._rows(uow, ids).items()}

    def narrowed(
        self, filtered: Mapping[str, Any], statement: Select[Any], values: dict[str, Any]
    ) -> Select[Any]:
        """A list's ``statement`` (of rows, of JSON texts, or its count), its ``values`` given,
        narrowed by the custom filters ``filtered`` (their values by attribute, added to
        ``values``)."""
        values.update(filtered)
        return self.filters.narrowed(statement, frozenset(filtered))

    def completed(
        self, filtered: Mapping[str, Any], statement: Select[Any], values: dict[str, Any]
    ) -> Select[Any]:
        """A list's ``statement`` of JSON texts, its ``values`` given: ``narrowed`` by the
        custom filters ``filtered``, and each text (its last column) completed by
        ``custom_fields`` (last, as the record's JSON shows it), by a statement over it that
        reads each record's values by its id."""
        statement = self.narrowed(filtered, statement, values)
        if self.table is None:
            return statement
        found = self._completed.get(statement)
        if found is None:
            assert self.table is not None
            page = statement.subquery("page")
            custom = self.table.alias("custom")
            shown = (
                select(_custom_only(self.table, self.fields).text_of_row(custom))
                .where(custom.c.id == page.c.id)
                .scalar_subquery()
            )
            *keys, text = page.c
            spliced = func.left(text, -1).concat(",").concat(func.substr(shown, 2))
            found = self._completed[statement] = built_once(select(*keys, spliced.label("shown")))
        return found

    def _rows(self, uow: UnitOfWork, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Record]:
        if self.by_ids is None or not ids:
            return {}
        rows = uow.connection.execute(self.by_ids, {"ids": list(ids)}).mappings()
        return {row["id"]: row for row in rows}

    def with_values_of_row(self, model: Any, row: Mapping[str, Any]) -> Any:
        """``model`` with the custom values ``row`` (of the table with their columns) holds: a
        write's row, read once."""
        return self.with_values(model, values_of_row(self.fields, row))

    def with_values(self, model: Any, values: Mapping[str, Any] | None) -> Any:
        """``model`` with its custom values (all null when its row had none)."""
        shown = values or dict.fromkeys(field.name for field in self.fields)
        # ``model`` may have values already (a record's read again by its fitted ``get``):
        # these replace them.
        return _with_values_type(type(model))(
            **{
                each.name: getattr(model, each.name)
                for each in dataclasses.fields(model)
                if each.name != CUSTOM_FIELDS
            },
            custom_fields=shown,
        )


def fitted(record: R, uow: UnitOfWork) -> R:
    """``record`` fitted to the caller's tenant's live fields of it."""
    live = DEFINITIONS.of(uow.connection, uow.scope.schema).get(record.noun, ())  # type: ignore[call-overload]
    kept: tuple[tuple[CustomField, ...], R] = _FITTED.get(
        (id(record), id(live)), lambda: (live, _fitted(record, live))
    )
    return kept[1]


# By the record (a module's constant) and the tuple of the tenant's live fields of it, which
# ``DEFINITIONS`` keeps until they change, by identity: hashing and comparing the fields
# themselves on every request costs more than the rest of fitting. Each value holds its tuple,
# which no other can then share the address of.
_FITTED: Kept[tuple[int, int], Any] = Kept()


def _fitted(record: R, live: tuple[CustomField, ...]) -> R:
    name = record.create_model.__name__
    of_create = values_model(f"{name}CustomFields", live, partial=False)
    of_change = values_model(f"{name}CustomFieldsPatch", live, partial=True)
    create, patch = input_models(
        record.create_model, record.patch_model, live, of_create, of_change
    )
    upsert = (
        create
        if record.upsert_model is record.create_model
        else input_models(record.upsert_model, record.patch_model, live, of_create, of_change)[0]
    )
    table = extended_table(record.shape.table, live) if live else record.shape.table
    values = CustomValues(
        live,
        of_create,
        of_change,
        table if live else None,
        _values_by_ids(table, live) if live else None,
        CustomFilters(live),
    )
    if not live:
        return dataclasses.replace(
            record, create_model=create, upsert_model=upsert, patch_model=patch, custom=values
        )
    return dataclasses.replace(
        record,
        shape=extended_shape(record.shape, table, live),
        create_model=create,
        upsert_model=upsert,
        patch_model=patch,
        custom=values,
        to_model=_to_model(record.to_model, values),
        read=_read(record.read, values),
        read_many=_read_many(record, values),
        lists=_listing(record.lists, values),
        writes=_writes(record.writes, values),
    )


def _values_by_ids(table: Table, live: tuple[CustomField, ...]) -> Select[Any]:
    return built_once(
        select(table.c.id, *(table.c[column_name(field.name)] for field in live)).where(
            table.c.id.in_(bindparam("ids", expanding=True))
        )
    )


def _custom_only(table: Table, live: tuple[CustomField, ...]) -> Shape:
    """A shape of ``custom_fields`` alone: what a record's JSON made without it lacks."""
    return extended_shape(Shape(table, ()), table, live)


def _to_model(
    base: Callable[[UnitOfWork, Record], Any], values: CustomValues
) -> Callable[[UnitOfWork, Record], Any]:
    return lambda uow, row: values.with_values(base(uow, row), values_of_row(values.fields, row))


def _read(
    base: Callable[[UnitOfWork, uuid.UUID], Any], values: CustomValues
) -> Callable[[UnitOfWork, uuid.UUID], Any]:
    def read(uow: UnitOfWork, record_id: uuid.UUID) -> Any:
        found = base(uow, record_id)
        if found is None:
            return None
        return values.with_values(found, values.values(uow, [record_id]).get(record_id))

    return read


def _read_many(
    record: SyncedRecord[Any, Any, Any], values: CustomValues
) -> Callable[[UnitOfWork, Sequence[uuid.UUID]], dict[uuid.UUID, Any]] | None:
    base = record.read_many
    if base is None:
        return None  # its rows by id, the custom columns among them (``to_model``)

    def read_many(uow: UnitOfWork, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
        found = base(uow, ids)
        custom = values.values(uow, list(found))
        return {key: values.with_values(model, custom.get(key)) for key, model in found.items()}

    return read_many


def _writes(base: OneByOne[Any, Any] | InBulk, values: CustomValues) -> OneByOne[Any, Any] | InBulk:
    """A record written one at a time reads the records its writes name from their rows, which
    hold the custom values (``batches.upserts.judged_statement``)."""
    if isinstance(base, InBulk):
        return base  # its rows are its read models (``to_model``)
    models = base.models

    def with_values(uow: UnitOfWork, rows: Sequence[Record]) -> list[Any]:
        found = models(uow, rows)
        return [
            values.with_values_of_row(model, row) for model, row in zip(found, rows, strict=True)
        ]

    return dataclasses.replace(base, models=with_values)


def _listing(base: Listing[Any, Any], values: CustomValues) -> Listing[Any, Any]:
    """The record's lists of read models with the custom values of each page's records, read
    by one more statement (its lists of JSON texts are ``CustomValues.completed``)."""

    def models(uow: UnitOfWork, filters: Any, page: PageRequest, narrowed: Completed) -> list[Any]:
        found = base.models(uow, filters, page, narrowed)
        custom = values.values(uow, [model.id for model in found])
        return [values.with_values(model, custom.get(model.id)) for model in found]

    return dataclasses.replace(base, models=models)


# Each read model's with custom values, by the read model.
_WITH_VALUES: dict[type, Callable[..., Any]] = {}


def _with_values_type(model: type) -> Callable[..., Any]:
    """The read model ``model`` with ``custom_fields``: the values by field name."""
    found = _WITH_VALUES.get(model)
    if found is None:
        if any(each.name == CUSTOM_FIELDS for each in dataclasses.fields(model)):
            found = model
        else:
            found = dataclasses.make_dataclass(
                f"{model.__name__}WithCustomFields",
                [(CUSTOM_FIELDS, dict[str, Any])],
                bases=(model,),
                frozen=True,
                slots=True,
            )
        _WITH_VALUES[model] = found
    return found
