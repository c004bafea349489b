"""``dealbase field``: a tenant's custom fields, as the API's tenant-wide key manages them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, get_args

import typer
from pydantic import TypeAdapter, ValidationError

from dealbase.db.schema_changes import SchemaChanges
from dealbase.errors import invalid_from_pydantic
from dealbase.ops import admin
from dealbase.ops.cli.common import (
    JsonFlag,
    TenantOption,
    command_database,
    command_group,
    command_settings,
    emit,
    fail_cleanly,
)
from dealbase.ops.embedded_postgres import database_url_of
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.models import (
    CustomField,
    CustomFieldFields,
    CustomFieldPatch,
    FieldType,
    RecordKind,
)
from dealbase.platform.validation import validated
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
from dealbase.tenancy.scope import Scope

field_cli = command_group("Define, list, change (archive) and delete custom fields.")

FieldArgument = Annotated[uuid.UUID, typer.Argument(metavar="FIELD_ID", help="Field id.")]
_RECORD_KINDS: TypeAdapter[RecordKind] = TypeAdapter(RecordKind)
_RECORD_METAVAR = "[" + "|".join(get_args(RecordKind)) + "]"
RecordOption = Annotated[
    str, typer.Option("--record", metavar=_RECORD_METAVAR, help="Record kind.")
]


@contextmanager
def _tenant_changes(tenant_id: uuid.UUID) -> Iterator[tuple[Scope, SchemaChanges]]:
    settings = command_settings()
    database = command_database(settings)
    url = settings.database_listen_url or database_url_of(settings)
    changes = SchemaChanges(url, TENANT_OWNER_ROLE)
    try:
        yield admin.tenant(database, tenant_id).scope, changes
    finally:
        changes.dispose()
        database.dispose()


def _record_kind(record: str) -> RecordKind:
    try:
        return _RECORD_KINDS.validate_python(record)
    except ValidationError as exc:
        raise invalid_from_pydantic(exc.errors(include_url=False), prefix=["record"]) from None


def _shown(field: CustomField) -> str:
    return f"{field.record} field {field.name} ({field.type.value}) {field.id}"


@field_cli.command("define")
@fail_cleanly
def field_define(
    tenant: TenantOption,
    record: RecordOption,
    name: Annotated[str, typer.Option(help="API name: lowercase letters, digits and _.")],
    label: Annotated[str, typer.Option(help="What people read.")],
    type_: Annotated[FieldType, typer.Option("--type", help="The values' type.")],
    max_length: Annotated[int | None, typer.Option(help="A text field's maximum length.")] = None,
    option: Annotated[list[str] | None, typer.Option(help="A select's option (repeat).")] = None,
    required: Annotated[bool, typer.Option(help="A record needs a value.")] = False,
    unique: Annotated[bool, typer.Option(help="Unique in a department.")] = False,
    filterable: Annotated[bool, typer.Option(help="Indexed for list filters.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Define a custom field: a column of the tenant's table, indexed if unique or filterable."""
    body: dict[str, Any] = {
        "record": record,
        "name": name,
        "label": label,
        "type": type_.value,
        "max_length": max_length,
        "options": None if option is None else [{"label": each} for each in option],
        "required": required,
        "unique": unique,
        "filterable": filterable,
    }
    fields = validated(CustomFieldFields, body)
    with _tenant_changes(tenant) as (scope, changes):
        field = asyncio.run(service.define(changes, scope, fields))
    emit(as_json, field, _shown(field))


@field_cli.command("list")
@fail_cleanly
def field_list(
    tenant: TenantOption,
    record: Annotated[
        str | None,
        typer.Option(metavar=_RECORD_METAVAR, help="Only this record kind's."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the tenant's custom fields, oldest first."""
    kind = None if record is None else _record_kind(record)
    database = command_database()
    try:
        scope = admin.tenant(database, tenant).scope
        found = database.run_here(scope, lambda uow: service.list_fields(uow, kind))
    finally:
        database.dispose()
    emit(as_json, found, "\n".join(_shown(field) for field in found) or "no custom fields")


@field_cli.command("change")
@fail_cleanly
def field_change(
    field_id: FieldArgument,
    tenant: TenantOption,
    label: Annotated[str | None, typer.Option(help="A new label.")] = None,
    type_: Annotated[FieldType | None, typer.Option("--type", help="A wider type.")] = None,
    max_length: Annotated[int | None, typer.Option(help="A greater maximum length.")] = None,
    required: Annotated[bool | None, typer.Option(help="A record needs a value.")] = None,
    unique: Annotated[bool | None, typer.Option(help="Unique in a department.")] = None,
    filterable: Annotated[bool | None, typer.Option(help="Indexed for list filters.")] = None,
    archived: Annotated[bool | None, typer.Option(help="Archived (values kept).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Change a custom field: what is given changes, and nothing that loses a value."""
    given = {
        "label": label,
        "type": None if type_ is None else type_.value,
        "max_length": max_length,
        "required": required,
        "unique": unique,
        "filterable": filterable,
        "archived": archived,
    }
    patch = validated(CustomFieldPatch, {k: v for k, v in given.items() if v is not None})
    values = {name: getattr(patch, name) for name in patch.model_fields_set}
    with _tenant_changes(tenant) as (scope, changes):
        field = asyncio.run(service.change(changes, scope, field_id, values, None))
    emit(as_json, field, _shown(field))


@field_cli.command("delete")
@fail_cleanly
def field_delete(field_id: FieldArgument, tenant: TenantOption, as_json: JsonFlag = False) -> None:
    """Delete an archived custom field with every record's value of it."""
    with _tenant_changes(tenant) as (scope, changes):
        asyncio.run(service.delete(changes, scope, field_id, None))
    emit(as_json, {"id": field_id, "deleted": True}, f"deleted field {field_id}")
