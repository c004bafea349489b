"""The rules of a field's definition that span several of its values, and of its column: the
limits, the names no field may take, which changes of type keep every value, and the SQL type
and names of what holds it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Table

from dealbase.errors import FieldError
from dealbase.ids import new_id
from dealbase.platform.custom_fields.models import FieldType, Option, OptionFields, RecordKind
from dealbase.platform.shapes import CUSTOM_COLUMN_PREFIX as COLUMN_PREFIX
from dealbase.platform.tables import activities, customers, deals
from dealbase.platform.validation import CUSTOM_FIELDS_PER_RECORD, EMAIL_MAX_LENGTH, SHORT_TEXT

TABLES: Mapping[RecordKind, Table] = {
    "customer": customers,
    "deal": deals,
    "activity": activities,
}
# Fields a record kind may have, archived ones included (they keep their column). Each is a
# column of the tenant's table, and a column is a row of the shared catalog: docs/scaling.md.
FIELDS_PER_RECORD = CUSTOM_FIELDS_PER_RECORD
# Of those, the unique or filterable ones: each has an index, a file of its own however few its
# rows, and files are what ten thousand tenants' schemas have most of (docs/scaling.md).
INDEXED_FIELDS_PER_RECORD = 10
# PostgreSQL allows a table 1,600 columns, and a dropped column keeps its number: past this,
# deleted fields have used up the table's numbers and no field may be added.
COLUMN_NUMBER_LIMIT = 1_500
# Names a field may not take besides its record's own: a record's JSON, filters and the upsert
# key would name either.
RESERVED_NAMES = frozenset({"custom_fields", "tenant_id", "department_id", "version"})
URL_MAX_LENGTH = 2048

# The SQL type of each type's column. Types that widen into one another share it, so that a
# change of type rewrites no row.
SQL_TYPES: Mapping[FieldType, str] = {
    FieldType.TEXT: "text",
    FieldType.EMAIL: "text",
    FieldType.URL: "text",
    FieldType.INTEGER: "numeric",
    FieldType.DECIMAL: "numeric",
    FieldType.BOOLEAN: "boolean",
    FieldType.DATE: "date",
    FieldType.TIMESTAMP: "timestamptz",
    FieldType.SINGLE_SELECT: "uuid",
    FieldType.MULTI_SELECT: "uuid[]",
}
# The changes of type every value survives as it is.
WIDENINGS = frozenset(
    {
        (FieldType.EMAIL, FieldType.TEXT),
        (FieldType.URL, FieldType.TEXT),
        (FieldType.INTEGER, FieldType.DECIMAL),
    }
)
# The longest text a type other than text holds: what its maximum becomes as text.
IMPLIED_MAX_LENGTH: Mapping[FieldType, int] = {
    FieldType.EMAIL: EMAIL_MAX_LENGTH,
    FieldType.URL: URL_MAX_LENGTH,
}
SELECTS = frozenset({FieldType.SINGLE_SELECT, FieldType.MULTI_SELECT})
UNIQUE_TYPES = frozenset(
    {FieldType.TEXT, FieldType.EMAIL, FieldType.URL, FieldType.INTEGER, FieldType.DECIMAL}
)
DEFAULT_TEXT_MAX_LENGTH = SHORT_TEXT


def column_name(name: str) -> str:
    return COLUMN_PREFIX + name


def index_name(record: RecordKind, name: str, unique: bool) -> str:
    """Unique in the schema across the three tables; at most 62 characters (a name's 48)."""
    return f"{record}_{COLUMN_PREFIX}{name}_{'u' if unique else 'f'}"


def unique_field_of(record: str, index: str) -> str | None:
    """The name of the unique field of ``record`` whose index is ``index``, if it is one."""
    prefix, suffix = f"{record}_{COLUMN_PREFIX}", "_u"
    if index.startswith(prefix) and index.endswith(suffix):
        return index.removeprefix(prefix).removesuffix(suffix)
    return None


def name_errors(record: RecordKind, name: str) -> list[FieldError]:
    if name in RESERVED_NAMES or name in TABLES[record].c:
        return [FieldError("name", "reserved", f"{name} is a name of the {record}'s own.")]
    return []


@dataclass(frozen=True, slots=True)
class Definition:
    """The values of a field's definition that the rules below weigh together."""

    type: FieldType
    max_length: int | None
    option_labels: Sequence[str] | None
    unique: bool


def definition_errors(definition: Definition) -> list[FieldError]:
    """Every rule ``definition`` breaks, each naming its field."""
    errors: list[FieldError] = []
    kind = definition.type
    if definition.max_length is not None and kind is not FieldType.TEXT:
        errors.append(
            FieldError("max_length", "not_allowed", "Only a text field has a maximum length.")
        )
    if kind in SELECTS and definition.option_labels is None:
        errors.append(FieldError("options", "missing", "A select field needs its options."))
    if kind not in SELECTS and definition.option_labels is not None:
        errors.append(FieldError("options", "not_allowed", "Only a select field has options."))
    if definition.unique and kind not in UNIQUE_TYPES:
        errors.append(
            FieldError(
                "unique",
                "not_allowed",
                "Only a text, email, URL, integer or decimal field can be unique.",
            )
        )
    labels = definition.option_labels or ()
    if len(set(labels)) != len(labels):
        errors.append(
            FieldError("options", "duplicate_item", "Two options must not have the same label.")
        )
    return errors


def new_options(given: Sequence[OptionFields]) -> list[FieldError] | tuple[Option, ...]:
    """A new field's options, each given a new id (an id given is refused)."""
    if any(option.id is not None for option in given):
        return [FieldError("options", "not_allowed", "A new field's options have no id yet.")]
    return tuple(Option(new_id(), option.label, option.archived) for option in given)


def changed_options(
    current: Sequence[Option], given: Sequence[OptionFields]
) -> list[FieldError] | tuple[Option, ...]:
    """The options after a change: every current one, by its id (changed or archived, never
    gone), and new ones without an id after them."""
    known = {option.id for option in current}
    named = [option.id for option in given if option.id is not None]
    errors: list[FieldError] = []
    if unknown := [str(each) for each in named if each not in known]:
        errors.append(
            FieldError("options", "not_found", f"No option has the id {', '.join(unknown)}.")
        )
    if set(named) != known or len(named) != len(set(named)):
        errors.append(
            FieldError(
                "options",
                "option_missing",
                "Every current option must be listed once, by its id: archive one to retire it.",
            )
        )
    if errors:
        return errors
    return tuple(Option(option.id or new_id(), option.label, option.archived) for option in given)


def type_change_errors(current: FieldType, wanted: FieldType) -> list[FieldError]:
    if current is wanted or (current, wanted) in WIDENINGS:
        return []
    return [
        FieldError(
            "type",
            "narrowing_type",
            f"A {current.value} field cannot become {wanted.value}: only email or url to text"
            " and integer to decimal keep every value.",
        )
    ]


def max_length_after(
    current_type: FieldType, current: int | None, wanted_type: FieldType, wanted: int | None
) -> list[FieldError] | int | None:
    """A text field's maximum after a change: never below what its values may already be."""
    if wanted_type is not FieldType.TEXT:
        return wanted
    floor = current if current_type is FieldType.TEXT else IMPLIED_MAX_LENGTH.get(current_type)
    if wanted is None:
        return floor
    if floor is not None and wanted < floor:
        return [
            FieldError(
                "max_length",
                "narrowing_type",
                f"The maximum length may only grow: it is {floor}.",
            )
        ]
    return wanted
