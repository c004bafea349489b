"""The OpenAPI document's schemas as JSON Schema validators: OpenAPI 3.1's dialect is JSON Schema
2020-12, and a schema anywhere in the document is named by its JSON pointer, its ``$ref``s
resolved against the document itself."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

# jsonschema ships no type information (schemathesis depends on it).
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]
from referencing import Registry
from referencing.jsonschema import DRAFT202012

DOCUMENT_URI = "urn:dealbase:openapi"

# jsonschema checks date-time only with an optional package; the document's date-times are RFC
# 3339 (a timestamp, a moment with its offset).
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True  # formats judge strings only
    if not _RFC3339.match(value):
        return False
    datetime.fromisoformat(value)
    return True


FORMATS = FormatChecker()
FORMATS.checks("date-time", raises=ValueError)(_is_date_time)


def pointer(*keys: str | int) -> str:
    """The JSON pointer (RFC 6901) of the location ``keys`` name, from the document's root."""
    return "".join("/" + str(key).replace("~", "~0").replace("/", "~1") for key in keys)


class DocumentSchemas:
    """Validators of values against the document's schemas, each made once."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        resource = DRAFT202012.create_resource(document)
        self._registry: Registry[Any] = Registry().with_resource(DOCUMENT_URI, resource)
        self._validators: dict[str, Any] = {}

    def errors(self, value: object, schema_pointer: str) -> list[str]:
        """What is wrong with ``value`` against the schema at ``schema_pointer``: nothing when
        it is valid, formats (uuid, date, date-time, email) included."""
        validator = self._validators.get(schema_pointer)
        if validator is None:
            validator = Draft202012Validator(
                {"$ref": f"{DOCUMENT_URI}#{schema_pointer}"},
                registry=self._registry,
                format_checker=FORMATS,
            )
            self._validators[schema_pointer] = validator
        return [
            f"{pointer(*error.absolute_path) or '/'}: {error.message}"
            for error in validator.iter_errors(value)
        ]
