"""A rule of the batch endpoints (``POST /{customers,deals,activities}/batch``) that no JSON Schema
can state: each operation's ``data`` is judged on its own.

The document gives each operation's ``data`` the schema it is judged against, so a batch whose
data breaks that schema is a negative case; the server answers it 200 all the same, with that
operation failed (a 422 result) and the others applied (docs/api.md, Batches). A negative batch
answered 200 is therefore no finding when its only violations are in operations' data (the
parameters the document names are valid; the server ignores others) and each of those operations
failed with 422; any other accepted negative batch stays one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import schemathesis
from schemathesis.core.failures import AcceptedNegativeData, Failure

from contract_tests.document_schemas import DocumentSchemas, pointer

BATCH_SUFFIX = "/batch"
JSON = "application/json"


class BatchRule:
    """The rule, with the batch bodies' schemas found in ``document``."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._bodies: dict[str, str] = {}  # batch path: its body's schema
        self._data: dict[str, dict[str, str]] = {}  # batch path: its operations' data, by op
        # batch path: its query's and headers' parameters, with their schemas
        self._parameters: dict[str, list[tuple[str, str, str]]] = {}
        for path in document["paths"]:
            if path.endswith(BATCH_SUFFIX):
                body = ("paths", path, "post", "requestBody", "content", JSON, "schema")
                batch = _resolved(document, _at(document, body))
                kinds = batch["properties"]["operations"]["items"]["discriminator"]["mapping"]
                self._bodies[path] = pointer(*body)
                self._data[path] = {
                    op: f"{operation.removeprefix('#')}/properties/data"
                    for op, operation in kinds.items()
                }
                parameters = document["paths"][path]["post"].get("parameters", [])
                self._parameters[path] = [
                    (
                        parameter["in"],
                        parameter["name"],
                        pointer("paths", path, "post", "parameters", index, "schema"),
                    )
                    for index, parameter in enumerate(parameters)
                ]
        self._schemas = DocumentSchemas(document)
        self._envelopes = DocumentSchemas(self._with_any_data(document))

    def filter_failure(
        self,
        context: schemathesis.HookContext,
        failure: Failure,
        case: schemathesis.Case[Any],
        response: schemathesis.Response,
    ) -> bool:
        """The rule as a ``filter_failure`` hook: every failure stands but a batch's accepted
        negative data that the server answered by the rule."""
        if not isinstance(failure, AcceptedNegativeData):
            return True
        path = case.operation.path
        return not (
            self.parameters_as_documented(path, case.query or {}, case.headers or {})
            and self.answered_per_operation(path, case.body, response)
        )

    def parameters_as_documented(
        self, path: str, query: Mapping[str, Any], headers: Mapping[str, Any]
    ) -> bool:
        """Whether each parameter the batch's document names is valid where it is sent; the
        server ignores the others (docs/api.md: unknown query parameters are ignored)."""
        sent = {
            "query": dict(query),
            "header": {name.lower(): value for name, value in headers.items()},
        }
        for location, name, schema in self._parameters.get(path, []):
            key = name.lower() if location == "header" else name
            if key in sent[location] and self._schemas.errors(sent[location][key], schema):
                return False
        return True

    def answered_per_operation(
        self, path: str, body: object, response: schemathesis.Response
    ) -> bool:
        """Whether ``body``, sent to ``path``, is a batch that breaks the document only in its
        operations' data, answered 200 with each of those operations failed 422."""
        if path not in self._bodies or response.status_code != 200:
            return False
        if self._envelopes.errors(body, self._bodies[path]):
            return False
        assert isinstance(body, dict), "a batch's body is an object"
        operations = body["operations"]
        results = response.json()["results"]
        if len(results) != len(operations):
            return False
        for operation, result in zip(operations, results, strict=True):
            broken = self._schemas.errors(operation["data"], self._data[path][operation["op"]])
            if broken and (result["outcome"], result["status"]) != ("failed", 422):
                return False
        return True

    def _with_any_data(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """``document`` with every batch operation's ``data`` any object: what the server
        judges a batch as a whole by."""
        envelopes: dict[str, Any] = copy.deepcopy(dict(document))
        for data_schemas in self._data.values():
            for data in data_schemas.values():
                operation, _, _ = data.rpartition("/properties/")
                _at_pointer(envelopes, operation)["properties"]["data"] = {"type": "object"}
        return envelopes


def _at(document: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = document
    for key in keys:
        node = node[key]
    return node


def _at_pointer(document: Mapping[str, Any], json_pointer: str) -> Any:
    keys = [key.replace("~1", "/").replace("~0", "~") for key in json_pointer.split("/")[1:]]
    return _at(document, tuple(keys))


def _resolved(document: Mapping[str, Any], schema: Mapping[str, Any]) -> Any:
    """``schema``, or the component its ``$ref`` names."""
    reference = schema.get("$ref")
    return schema if reference is None else _at_pointer(document, reference.removeprefix("#"))
