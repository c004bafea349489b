"""Defining, changing, archiving and deleting a tenant's custom fields, each change with its
column and indexes (``db.schema_changes``), one change of a schema's fields at a time."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection

from dealbase.db.schema_changes import SchemaChanges
from dealbase.db.units import UnitOfWork
from dealbase.errors import (
    FieldError,
    FieldLimitReached,
    FieldNameTaken,
    FieldNotArchived,
    Forbidden,
    Invalid,
    NotFound,
    PreconditionFailed,
)
from dealbase.ids import new_id
from dealbase.platform.custom_fields import repository
from dealbase.platform.custom_fields.definitions import DEFINITIONS
from dealbase.platform.custom_fields.models import (
    CustomField,
    CustomFieldFields,
    FieldType,
    OptionFields,
    RecordKind,
    Settable,
)
from dealbase.platform.custom_fields.rules import (
    COLUMN_NUMBER_LIMIT,
    DEFAULT_TEXT_MAX_LENGTH,
    FIELDS_PER_RECORD,
    INDEXED_FIELDS_PER_RECORD,
    Definition,
    changed_options,
    definition_errors,
    max_length_after,
    name_errors,
    new_options,
    type_change_errors,
)
from dealbase.platform.versioning import Expected
from dealbase.tenancy.scope import Scope

_BROKEN_RULES = "The field's definition breaks the rules named in errors."


def list_fields(uow: UnitOfWork, record: RecordKind | None) -> list[CustomField]:
    return repository.list_fields(uow.connection, record)


def get(uow: UnitOfWork, field_id: uuid.UUID) -> CustomField:
    field = repository.get_field(uow.connection, field_id)
    if field is None:
        raise _not_found(field_id)
    return field


async def define(changes: SchemaChanges, scope: Scope, fields: CustomFieldFields) -> CustomField:
    """A new field of ``fields.record``, its column added and its indexes built."""
    return await asyncio.to_thread(_define, changes, _definer(scope), fields)


async def change(
    changes: SchemaChanges,
    scope: Scope,
    field_id: uuid.UUID,
    patch: Mapping[str, Any],
    expected: Expected | None,
) -> CustomField:
    """The field with the values ``patch`` gives (a PATCH body's, absent ones unchanged)."""
    return await asyncio.to_thread(_change, changes, _definer(scope), field_id, patch, expected)


async def delete(
    changes: SchemaChanges, scope: Scope, field_id: uuid.UUID, expected: Expected | None
) -> None:
    """The archived field, its column and its values gone."""
    await asyncio.to_thread(_delete, changes, _definer(scope), field_id, expected)


def _definer(scope: Scope) -> str:
    """The schema a caller may change the fields of: a tenant-wide caller's (a field belongs to
    every department of the tenant), never a department's."""
    if scope.department_id is not None:
        raise Forbidden("Defining a custom field takes a tenant-wide key: a field is the tenant's.")
    return scope.schema


@contextmanager
def _changing(changes: SchemaChanges, schema: str) -> Iterator[Connection]:
    """A change of the schema's fields: its session, holding their lock; this process's kept
    fields of the schema forgotten after it (others are told by the lock's release)."""
    try:
        with (
            changes.session(schema) as connection,
            repository.definitions_locked(connection, schema),
        ):
            yield connection
    finally:
        DEFINITIONS.forget(schema)


def _define(changes: SchemaChanges, schema: str, fields: CustomFieldFields) -> CustomField:
    wanted = _new_definition(fields)
    with _changing(changes, schema) as connection:
        _check_room(connection, schema, fields, wanted)
        field_id = new_id()
        # Its indexes come after: the row says none until they are built.
        bare = dataclasses.replace(wanted, unique=False, filterable=False)

        def add(connection: Connection) -> CustomField:
            field = repository.insert_field(connection, field_id, fields.record, fields.name, bare)
            repository.add_column(connection, schema, field)
            return field

        field = changes.in_short_locks(connection, add)
        if wanted == bare:
            return field
        _index(connection, schema, field, wanted)
        return repository.update_field(connection, field_id, wanted)


def _new_definition(fields: CustomFieldFields) -> Settable:
    """What a new field's definition holds, every rule it breaks named."""
    options = None if fields.options is None else new_options(fields.options)
    labels = None if fields.options is None else [option.label for option in fields.options]
    errors = name_errors(fields.record, fields.name) + definition_errors(
        Definition(fields.type, fields.max_length, labels, fields.unique)
    )
    if isinstance(options, list):
        errors += options
    if errors or isinstance(options, list):
        raise Invalid(_BROKEN_RULES, errors)
    max_length = fields.max_length
    if fields.type is FieldType.TEXT and max_length is None:
        max_length = DEFAULT_TEXT_MAX_LENGTH
    return Settable(
        fields.label,
        fields.type,
        max_length,
        options,
        fields.required,
        fields.unique,
        fields.filterable,
        archived=False,
    )


def _check_room(
    connection: Connection, schema: str, fields: CustomFieldFields, wanted: Settable
) -> None:
    """Refuses a name the record's fields have, and a field past the record's limits."""
    existing = repository.fields_for_change(connection, fields.record)
    if any(field.name == fields.name for field in existing):
        raise FieldNameTaken(f"The {fields.record} already has a field named {fields.name}.")
    if (
        len(existing) >= FIELDS_PER_RECORD
        or repository.highest_column_number(connection, schema, fields.record)
        >= COLUMN_NUMBER_LIMIT
    ):
        raise FieldLimitReached(
            f"The {fields.record} has as many custom fields as it may ({FIELDS_PER_RECORD},"
            " archived ones included); delete an archived one first."
        )
    _check_indexed(existing, wanted, fields.record)


def _change(
    changes: SchemaChanges,
    schema: str,
    field_id: uuid.UUID,
    patch: Mapping[str, Any],
    expected: Expected | None,
) -> CustomField:
    with _changing(changes, schema) as connection:
        current = _current(repository.field_for_change(connection, field_id), field_id, expected)
        wanted = _changed(current, patch)
        if wanted == current.settable():
            return current
        others = repository.fields_for_change(connection, current.record)
        _check_indexed([each for each in others if each.id != field_id], wanted, current.record)
        _index(connection, schema, current, wanted)
        return repository.update_field(connection, field_id, wanted)


def _delete(
    changes: SchemaChanges, schema: str, field_id: uuid.UUID, expected: Expected | None
) -> None:
    with _changing(changes, schema) as connection:
        current = _current(repository.field_for_change(connection, field_id), field_id, expected)
        if not current.archived:
            raise FieldNotArchived(
                f"Archive the field {current.name} before deleting it: deleting drops its values."
            )
        for unique in (True, False):
            repository.drop_index(connection, schema, current, unique)

        def drop(connection: Connection) -> None:
            repository.delete_field(connection, field_id)
            repository.drop_column(connection, schema, current)

        changes.in_short_locks(connection, drop)


def _check_indexed(others: list[CustomField], wanted: Settable, record: RecordKind) -> None:
    indexed = sum(1 for each in others if each.unique or each.filterable)
    if (wanted.unique or wanted.filterable) and indexed >= INDEXED_FIELDS_PER_RECORD:
        raise FieldLimitReached(
            f"The {record} has as many unique or filterable custom fields as it may"
            f" ({INDEXED_FIELDS_PER_RECORD}): each is an index of its own."
        )


def _current(
    field: CustomField | None, field_id: uuid.UUID, expected: Expected | None
) -> CustomField:
    if field is None:
        raise _not_found(field_id)
    if expected is not None and not expected.admits(field.version):
        raise PreconditionFailed(
            "The custom field has changed since the version named in If-Match; read it again."
        )
    return field


def _changed(current: CustomField, patch: Mapping[str, Any]) -> Settable:
    """``current``'s values with ``patch``'s, each rule checked; every broken one named."""
    was = current.settable()
    kind: FieldType = patch.get("type", was.type)
    errors: list[FieldError] = type_change_errors(was.type, kind)
    given_max: int | None = patch.get("max_length")
    max_length = max_length_after(was.type, was.max_length, kind, given_max)
    if isinstance(max_length, list):
        errors += max_length
    given: list[OptionFields] | None = patch.get("options")
    options = was.options if given is None else changed_options(was.options or (), given)
    if isinstance(options, list):
        errors += options
    listed = given if given is not None else was.options
    labels = None if listed is None else [option.label for option in listed]
    unique: bool = patch.get("unique", was.unique)
    errors += definition_errors(Definition(kind, given_max, labels, unique))
    if errors or isinstance(max_length, list) or isinstance(options, list):
        raise Invalid(_BROKEN_RULES, errors)
    return Settable(
        patch.get("label", was.label),
        kind,
        max_length,
        options,
        patch.get("required", was.required),
        unique,
        patch.get("filterable", was.filterable),
        patch.get("archived", was.archived),
    )


def _index(connection: Connection, schema: str, field: CustomField, wanted: Settable) -> None:
    """Builds the indexes ``wanted`` has and ``field`` lacks, then drops those it no longer
    has: a unique index serves the filters too."""
    before = _indexes(field.unique, field.filterable)
    after = _indexes(wanted.unique, wanted.filterable)
    for unique in after - before:
        repository.build_index(connection, schema, field, unique=unique)
    for unique in before - after:
        repository.drop_index(connection, schema, field, unique)


def _indexes(unique: bool, filterable: bool) -> set[bool]:
    """The field's indexes, each named by whether it is the unique one."""
    if unique:
        return {True}
    return {False} if filterable else set()


def _not_found(field_id: uuid.UUID) -> NotFound:
    return NotFound(f"No custom field has the id {field_id}.")
