"""A synced record described once (``SyncedRecord``), and the service every synced record is,
written once over that description: its reads (``get``, ``by_ids``, ``list_page``, their JSON
made by PostgreSQL), its change (``update``, and ``change_later`` of an upsert that finds its
record), its delete, and its creates and upserts of a batch or of one PUT (``record_writes``:
the one engine of every record's upserts).

Customers, deals and activities live the same life: owned by a department, versioned, an optional
external id, each write recorded as an event. What is particular to one is in its descriptor: its
noun, its rows (``rows.OwnedRows`` of its shape's table), its read model made from a row, how it reads one and a page
of its lists, its JSON, the fields that name other rows of its department and how they are
checked, the events a change of one field is besides ``<noun>.updated``, its side effects around
a delete, and how its creates and upserts reach its table (``OneByOne`` or ``InBulk``). Its own
verbs (a deal's moves and links, each record's create with its event in one statement) stay in
its service, which declares its descriptor as ``RECORD``.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Select, Table, bindparam, select

from dealbase.db.statements import Record, built_once
from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.errors import Invalid
from dealbase.ids import new_ids
from dealbase.platform import record_changes
from dealbase.platform.batches import service as batches
from dealbase.platform.batches.models import Batch, Fields, Result, single_upsert
from dealbase.platform.batches.upserts import Judging
from dealbase.platform.custom_fields import fitting
from dealbase.platform.custom_fields.fitting import CustomValues
from dealbase.platform.event_types import EventType
from dealbase.platform.events import repository as event_repository
from dealbase.platform.events import service as events
from dealbase.platform.listing import ListFilters
from dealbase.platform.pagination import Page, PageRequest, page_request
from dealbase.platform.record_changes import ChangedRecord
from dealbase.platform.record_writes import InBulk, Model, OneByOne, apply_writes
from dealbase.platform.rows import OwnedRows, ids_in_department, in_bound_department
from dealbase.platform.shapes import CUSTOM_FIELDS, JsonObject, Shape
from dealbase.platform.validation import validated
from dealbase.platform.versioning import Expected
from dealbase.tenancy.scope import Scope

Filter = TypeVar("Filter", bound=BaseModel)

# A record of a page of REST's lists: its id, the value its list sorts by besides the id (None
# in a list by id alone), and its JSON text made by PostgreSQL.
JsonRow = tuple[uuid.UUID, int | None, str]
# What a list's statement is run as, given its values: itself, or (a record fitted to a
# tenant's custom fields) one narrowed by the custom filters, whose values it adds, and (of JSON
# texts) adding the custom values to each text.
Completed = Callable[[Select[Any], dict[str, Any]], Select[Any]]


def as_it_is(statement: Select[Any], values: dict[str, Any]) -> Select[Any]:
    return statement


def _no_side_effects(uow: UnitOfWork, record_id: uuid.UUID) -> None:
    return None


def _by_id_alone(filters: BaseModel) -> None:
    return None


@dataclass(frozen=True)
class Listing(Generic[Model, Filter]):
    """How a record's lists are read: up to ``page.limit + 1`` records (the extra one tells there
    is more) that the caller may see and the filters admit, in the filters' order, by statements
    of its repository."""

    # Each statement run as the ``Completed`` given makes it (narrowed by custom filters).
    models: Callable[[UnitOfWork, Filter, PageRequest, Completed], Sequence[Model]]
    texts: Callable[[UnitOfWork, Filter, PageRequest, Completed], Sequence[JsonRow]]
    # Its filters' rules, which also count the records they admit.
    filtering: ListFilters
    # The value a list in the filters' order sorts by besides the id (a deal's volume), which
    # its cursors carry; None: by id alone.
    sort_of: Callable[[Filter], Callable[[Model], int] | None] = _by_id_alone


@dataclass(frozen=True)
class SyncedRecord(Generic[Model, Fields, Filter]):
    """What is particular to one synced record; its verbs below read nothing else of it."""

    noun: str  # "activity": what its errors and event types call it
    # A row of its table as its read model (a deal's reads its customers).
    to_model: Callable[[UnitOfWork, Record], Model]
    # The record the caller may see by its id, as its read model; None if there is none.
    read: Callable[[UnitOfWork, uuid.UUID], Model | None]
    lists: Listing[Model, Filter]
    # Its JSON, as its events and REST show it (``resources.<NOUN>``): made of a read model in
    # Python, and of a row by PostgreSQL.
    shape: Shape
    # The models a batch's creates and upserts pass; the upsert's fields' order is the order a
    # change's events name them in.
    create_model: type[Fields]
    upsert_model: type[Fields]
    # What a PATCH passes (``validation.partial`` of its create model, mostly).
    patch_model: type[BaseModel]
    # How its creates and upserts reach its table (``record_writes.apply_writes``).
    writes: OneByOne[Model, Fields] | InBulk
    # Each field that names a row of another table, which must be of the record's department.
    references: Mapping[str, Table] = field(default_factory=dict)
    # Events a change of one field is besides ``<noun>.updated`` (with that field alone).
    field_events: tuple[tuple[str, EventType], ...] = ()
    # Before its delete, once its ownership is known: what its delete does to other records.
    before_delete: Callable[[UnitOfWork, uuid.UUID], None] = _no_side_effects
    # Read before its delete when its row alone cannot show it as it was (a deal's customers).
    deleted_as: Callable[[UnitOfWork, uuid.UUID], Model] | None = None
    # Columns besides its table's that ``to_model`` reads from a row (a deal's employee's name).
    read_columns: tuple[ColumnElement[Any], ...] = ()
    # Many by id, when ``to_model`` reads more than the row (a deal: its customers for all of
    # them in one statement); None: its rows by id, each made a read model.
    read_many: Callable[[UnitOfWork, Sequence[uuid.UUID]], dict[uuid.UUID, Model]] | None = None
    # Fitted to a tenant's custom fields (``custom_fields.fitting``): their values' rules; None
    # for the record as declared, which each verb fits to the caller's tenant first.
    custom: CustomValues | None = None
    # Its table's rows (its shape's table), as its repository's verbs also read them.
    rows: OwnedRows = field(init=False)
    # What its change statement (``record_changes``) is made of.
    changes: ChangedRecord = field(init=False)
    # What its creates and upserts are judged against (``batches.upserts``).
    judging: Judging = field(init=False)
    # Its version and JSON text by id (``get_as_json``), for a caller with a department or not.
    one_as_json: Mapping[bool, Select[Any]] = field(init=False)
    # Itself with upserts by each unique custom field's column (``keyed_by``).
    _keyed: dict[str, SyncedRecord[Model, Fields, Filter]] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        table = self.shape.table
        object.__setattr__(self, "rows", OwnedRows(table, self.noun))
        changes = ChangedRecord(
            table, self.noun, self.shape.text_of_row, self.references, self.field_events
        )
        object.__setattr__(self, "changes", changes)
        custom_columns = () if self.custom is None else self.custom.columns_of_fields
        fields = (
            *(
                name
                for name in self.upsert_model.model_fields
                if name in table.c and name != "external_id"
            ),
            *custom_columns,
        )
        judging = Judging(table, fields, self.references, self.read_columns)
        object.__setattr__(self, "judging", judging)
        object.__setattr__(
            self,
            "one_as_json",
            {
                one_department: built_once(
                    select(table.c.version, self.shape.text_of_row(table)).where(
                        table.c.id == bindparam("record_id", type_=table.c.id.type),
                        in_bound_department(table, one_department),
                    )
                )
                for one_department in (False, True)
            },
        )
        if isinstance(self.writes, InBulk) and self.field_events:
            raise ValueError("a record written in bulk records no field events")

    def as_json(self, model: Model) -> JsonObject:
        return self.shape.as_json(model)

    def fitted(self, uow: UnitOfWork) -> SyncedRecord[Model, Fields, Filter]:
        """The record fitted to the caller's tenant's custom fields (itself once fitted)."""
        return self if self.custom is not None else fitting.fitted(self, uow)

    def typed(self, fields: Fields, model: type[Fields]) -> Fields:
        """``fields`` (a body's, as the record as declared takes it) as a fitted record's
        ``model`` (its create or upsert model) types them, their custom values judged."""
        custom = self.custom
        if isinstance(fields, model) or custom is None:
            return fields
        if getattr(fields, CUSTOM_FIELDS, None) is None and not custom.required:
            return fields  # nothing to judge, nor to write
        return validated(model, fields.model_dump(mode="json", exclude_unset=True))

    def created_columns(self, fields: BaseModel) -> dict[str, object]:
        """The columns of the custom values a create's ``fields`` (a body's) give, judged by a
        fitted record's fields: every field's, null unless given; of ``fields`` the fitted
        create model typed already (a batch's), their judged values."""
        custom = self.custom
        if custom is not None and isinstance(fields, self.create_model):
            # Its dump names them by column (``custom_fields.values``), bound as
            # ``CustomValues.columns`` binds them.
            dumped = fields.model_dump(mode="json", include={CUSTOM_FIELDS})
            return {name: dumped.get(name) for name in custom.columns_of_fields}
        given = getattr(fields, CUSTOM_FIELDS, None)
        if custom is None or (given is None and not custom.fields):
            return {}
        return custom.columns(given, change=False)

    def changes_of(self, patch: BaseModel) -> dict[str, object]:
        """The values a fitted record's PATCH ``patch`` gives, by column: its custom values
        judged."""
        changes = patch.model_dump(exclude_unset=True)
        given = changes.pop(CUSTOM_FIELDS, None)
        assert self.custom is not None
        changes.update(self.custom.columns(given, change=True))
        return changes

    def event(self, happened: str) -> EventType:
        return cast(EventType, f"{self.noun}.{happened}")

    def check_references(
        self, uow: UnitOfWork, department_id: uuid.UUID, values: Mapping[str, object]
    ) -> None:
        """Every id ``values`` give a reference must name a row of the record's department
        (``department_id``): else Invalid, each such field ``not_found``; one statement a
        reference given."""
        unknown = [
            name
            for name, table in self.references.items()
            if isinstance(value := values.get(name), uuid.UUID)
            and not ids_in_department(uow.connection, table, department_id, [value])
        ]
        if unknown:
            raise Invalid.unknown_references(unknown, f"the {self.noun}'s department")

    def get(self, uow: UnitOfWork, record_id: uuid.UUID) -> Model:
        """The record, if the caller may see it; else NotFound."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.get(uow, record_id)
        found = self.read(uow, record_id)
        if found is None:
            raise self.rows.not_found(record_id)
        return found

    def get_as_json(self, uow: UnitOfWork, record_id: uuid.UUID) -> tuple[int, str]:
        """``get``'s record as its version and its JSON text made by PostgreSQL (REST's read of
        one)."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.get_as_json(uow, record_id)
        scope = uow.scope
        values: dict[str, object] = {"record_id": record_id, "tenant_id": str(scope.tenant_id)}
        if scope.department_id is not None:
            values["department_id"] = scope.department_id
        statement = self.one_as_json[scope.department_id is not None]
        row = uow.connection.execute(statement, values).first()
        if row is None:
            raise self.rows.not_found(record_id)
        return row[0], row[1]

    def by_ids(self, uow: UnitOfWork, record_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Model]:
        """Many records the caller may see, by id (what DataLoaders batch); unknown ids are left
        out. One statement, or ``read_many``'s few."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.by_ids(uow, record_ids)
        if self.read_many is not None:
            return self.read_many(uow, record_ids)
        rows = self.rows.by_ids(uow.connection, uow.scope.department_id, record_ids)
        return {row_id: self.to_model(uow, row) for row_id, row in rows.items()}

    def list_page(
        self,
        uow: UnitOfWork,
        filters: Filter,
        limit: int | None,
        cursor: str | None,
        custom_filters: Mapping[str, object] | None = None,
    ) -> Page[Model]:
        """A page of the records the caller may see that ``filters`` admit, after ``cursor``,
        narrowed by ``custom_filters`` too (filters on the tenant's custom fields by their
        parameters' names, their values text or JSON: ``custom_fields.filters``)."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.list_page(uow, filters, limit, cursor, custom_filters)
        filters, filtered = self._custom_filtered(filters, custom_filters)
        narrowed: Completed = as_it_is
        if filtered:
            assert self.custom is not None
            narrowed = functools.partial(self.custom.narrowed, filtered)
        page = page_request(limit, cursor, filters)
        found = self.lists.models(uow, filters, page, narrowed)
        return page.page_of(found, _id_of, filters, self.lists.sort_of(filters))

    def _custom_filtered(
        self, filters: Filter, custom_filters: Mapping[str, object] | None
    ) -> tuple[Filter, dict[str, Any]]:
        """A fitted record's ``filters`` with ``custom_filters`` judged (``CustomFilters``), and
        the values of the custom ones given, by attribute."""
        custom = self.custom
        if custom is None or not (custom.fields or custom_filters):
            return filters, {}
        judged = cast(Filter, custom.filters.judged(filters, custom_filters or {}))
        return judged, custom.filters.values(judged)

    def list_page_as_json(
        self,
        uow: UnitOfWork,
        filters: Filter,
        limit: int | None,
        cursor: str | None,
        custom_filters: Mapping[str, object] | None = None,
    ) -> Page[str]:
        """``list_page`` with each record as its JSON text made by PostgreSQL (a page of REST's
        list, made without a read model)."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.list_page_as_json(uow, filters, limit, cursor, custom_filters)
        custom = self.custom
        completed: Completed = as_it_is
        if custom is not None and (custom.fields or custom_filters):
            filters, filtered = self._custom_filtered(filters, custom_filters)
            completed = functools.partial(custom.completed, filtered)
        page = page_request(limit, cursor, filters)
        rows = self.lists.texts(uow, filters, page, completed)
        by_value = self.lists.sort_of(filters) is not None
        found = page.page_of(rows, _row_id, filters, _row_sort if by_value else None)
        return Page([row[2] for row in found.items], found.next_cursor, found.cursors)

    def count(
        self,
        uow: UnitOfWork,
        filters: Filter,
        custom_filters: Mapping[str, object] | None = None,
    ) -> int:
        """How many records ``list_page`` lists over every page, of the same filters."""
        if custom_filters and (fitted := self.fitted(uow)) is not self:
            return fitted.count(uow, filters, custom_filters)
        filters, filtered = self._custom_filtered(filters, custom_filters)
        narrowed = None
        if filtered:
            assert self.custom is not None
            narrowed = functools.partial(self.custom.narrowed, filtered)
        connection, department_id = uow.connection, uow.scope.department_id
        return self.lists.filtering.count(connection, department_id, filters, narrowed)

    def update(
        self,
        uow: UnitOfWork,
        record_id: uuid.UUID,
        patch: BaseModel,
        expected: Expected | None = None,
    ) -> Model:
        """Applies the fields ``patch`` carries (``null`` clears) as ``change_later`` does, its
        statement sent now."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.update(uow, record_id, patch, expected)
        changes = self.changes_of(patch)
        return self.to_model(uow, self.change_later(uow, record_id, changes, expected).read())

    def update_as_json(
        self,
        uow: UnitOfWork,
        record_id: uuid.UUID,
        patch: BaseModel,
        expected: Expected | None = None,
    ) -> AfterCommit[tuple[int, str]]:
        """``update``'s record as its version and its JSON text made by PostgreSQL, from one
        statement sent with the unit of work's next round trip (REST's answer)."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.update_as_json(uow, record_id, patch, expected)
        written = self.change_later(uow, record_id, self.changes_of(patch), expected)

        def shown() -> tuple[int, str]:
            row = written.read()
            return row["version"], row["shown"]

        return AfterCommit(shown)

    def change_later(
        self,
        uow: UnitOfWork,
        record_id: uuid.UUID,
        changes: Mapping[str, object],
        expected: Expected | None = None,
    ) -> AfterCommit[Record]:
        """``changes`` (values of the record's fields, ``None`` clearing one) as a new version
        of the record, if the caller owns it (else NotFound), the ids its references name are of
        the record's department (else Invalid, each such field ``not_found``) and it is at a
        version ``expected`` admits (else PreconditionFailed); its events: ``<noun>.updated``
        with the fields whose value changed and their values before, and each of
        ``field_events`` whose field changed. Every accepted change, even an empty one, is a new
        version; one that changes no value is no event.

        One statement (``record_changes``) sent with the unit of work's next round trip: with
        the COMMIT, when nothing else runs. Its row is read once it has gone: the record's
        columns, its JSON text (``shown``), the fields that changed.

        On a distributed schema, two statements Citus routes whole (``record_changes.Routed``),
        sent now: the events they make are inserted with the next round trip (with the COMMIT,
        when nothing else runs), which their answer must have reached first; a second round
        trip."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.change_later(uow, record_id, changes, expected)
        shape, values = _change_parameters(self.changes, uow.scope, record_id, changes, expected)
        connection, meaning = uow.connection, self.rows.unique_value_meaning
        if connection.distributed:
            return self._change_routed(uow, shape, values, record_id)
        deferred = connection.defer(
            record_changes.statement(self.changes, shape), values, meaning=meaning
        )
        events.recorded_by_statement(uow, lambda: _wakes(deferred.rows().mappings().first()))
        return AfterCommit(lambda: self._written(deferred.rows().mappings().first(), record_id))

    def _change_routed(
        self,
        uow: UnitOfWork,
        shape: record_changes.Shape,
        values: dict[str, object],
        record_id: uuid.UUID,
    ) -> AfterCommit[Record]:
        """``change_later`` on a distributed schema: its two statements sent now, the events
        they make inserted with the next round trip."""
        connection = uow.connection
        routed = record_changes.routed(self.changes, shape)
        written = connection.defer(routed.update, values, meaning=self.rows.unique_value_meaning)
        check = connection.defer(routed.check, values)
        row = record_changes.routed_row(
            written.rows().mappings().first(), check.rows().mappings().first()
        )
        if row is not None:
            event_repository.record_texts_later(connection, row["events"])
        events.recorded_by_statement(uow, lambda: _wakes(row))
        return AfterCommit(lambda: self._written(row, record_id))

    def _written(self, row: Record | None, record_id: uuid.UUID) -> Record:
        """The row ``change_later``'s statement wrote, or why it wrote none."""
        if row is None:
            raise self.rows.not_found(record_id)
        if row["id"] is None:
            unknown = [name for name in self.references if row.get(f"known_{name}") is False]
            if unknown:
                raise Invalid.unknown_references(unknown, f"the {self.noun}'s department")
            raise self.rows.changed_since_expected()
        return row

    def delete(
        self, uow: UnitOfWork, record_id: uuid.UUID, expected: Expected | None = None
    ) -> None:
        """Deletes the record, if the caller owns it and it is at a version ``expected`` admits,
        with its ``before_delete`` side effects; its event ``<noun>.deleted`` shows it as it
        was."""
        if (fitted := self.fitted(uow)) is not self:
            fitted.delete(uow, record_id, expected)
            return
        connection, department_id = uow.connection, uow.scope.department_id
        # Owned, or NotFound, before any side effect.
        shown = None if self.deleted_as is None else self.deleted_as(uow, record_id)
        has_side_effects = self.before_delete is not _no_side_effects
        if (
            shown is None
            and has_side_effects
            and not self.rows.by_ids(connection, department_id, [record_id])
        ):
            raise self.rows.not_found(record_id)
        self.before_delete(uow, record_id)
        row = self.rows.delete(connection, department_id, record_id, expected)
        if shown is None:
            shown = self.to_model(uow, row)
        events.record(uow, self.event("deleted"), shown.department_id, self.as_json(shown))

    def upsert(
        self,
        uow: UnitOfWork,
        external_id: str,
        fields: Fields,
        *,
        expected: Expected | None = None,
        unless: Expected | None = None,
    ) -> AfterCommit[Result[Model]]:
        """Creates the record with ``external_id``, or changes the fields ``fields`` were given
        of the one that has it (its references checked, its events as ``change_later``'s); one
        that changes nothing writes nothing (no version, no event): ``unchanged``. ``expected``
        (If-Match) needs the record to exist at one of its versions; ``unless`` (If-None-Match)
        needs it not to exist at one of its versions (``*``: not to exist). Its result once
        read, or its error raised (a record written one at a time raises it now, and the unit of
        work rolls back)."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.upsert(uow, external_id, fields, expected=expected, unless=unless)
        write = single_upsert(external_id, self.typed(fields, self.upsert_model), expected, unless)
        applied = apply_writes(self, uow, [write], isolated=False)

        def result(results: Mapping[int, Result[Model]]) -> Result[Model]:
            found = results[write.index]
            if found.error is not None:
                raise found.error
            return found

        if isinstance(applied, AfterCommit):
            return AfterCommit(lambda: result(applied.read()))
        done = result(applied)
        return AfterCommit(lambda: done)

    def batch(
        self, uow: UnitOfWork, operations: Batch, *, atomic: bool
    ) -> AfterCommit[list[Result[Model]]]:
        """Up to a thousand creates and upserts (``batches.run``): their data judged by
        ``create_model`` and ``upsert_model``, then applied by ``apply_writes``, each operation
        alone unless the batch is ``atomic`` (then the first failure rejects it all)."""
        if (fitted := self.fitted(uow)) is not self:
            return fitted.batch(uow, operations, atomic=atomic)
        record = self if operations.upsert_key is None else self.keyed_by(operations.upsert_key)
        return batches.run(
            uow,
            operations,
            lambda uow, writes: apply_writes(record, uow, writes, isolated=not atomic),
            create=self.create_model,
            upsert=self.upsert_model,
            atomic=atomic,
            key=record.judging.key,
        )

    def keyed_by(self, upsert_key: str) -> SyncedRecord[Model, Fields, Filter]:
        """The fitted record whose upserts name their records by the unique custom field
        ``upsert_key`` (``custom_fields.<name>``): else Invalid, naming ``upsert_key``."""
        custom = self.custom
        assert custom is not None, "a batch's record is fitted"
        column = custom.unique_column(upsert_key)
        keyed = self._keyed.get(column)
        if keyed is None:
            keyed = dataclasses.replace(self)
            object.__setattr__(keyed, "judging", dataclasses.replace(self.judging, key=column))
            self._keyed[column] = keyed
        return keyed


def _change_parameters(
    record: ChangedRecord,
    scope: Scope,
    record_id: uuid.UUID,
    changes: Mapping[str, object],
    expected: Expected | None,
) -> tuple[record_changes.Shape, dict[str, object]]:
    """A change's shape (which of the record's change statements) and that statement's
    parameters, with the ids of the events it may make."""
    versions = None if expected is None else expected.versions
    shape = record_changes.Shape(
        tuple(changes), scope.department_id is not None, versions is not None
    )
    event_names = record_changes.event_ids(record, shape)
    values = record_changes.parameters(
        shape,
        record_id,
        scope.department_id,
        changes,
        versions,
        event_names,
        new_ids(len(event_names)),
        scope.tenant_id,
    )
    return shape, values


def _id_of(model: Model) -> uuid.UUID:
    return model.id


def _row_id(row: JsonRow) -> uuid.UUID:
    return row[0]


def _row_sort(row: JsonRow) -> int:
    # A list sorted by a value besides the id has it in every row: its statement sorts by it.
    return cast(int, row[1])


def _wakes(row: Record | None) -> bool:
    return row is not None and bool(row["changed_fields"]) and bool(row["wakes"])
