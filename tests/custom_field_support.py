"""Custom fields defined through the REST API, as the tests of records carrying them need them:
a field of each scalar type, and selects whose options' ids they use."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.testclient import TestClient

from tests.rest_api.test_custom_fields import define

# A field of each type whose values the tests tell apart, by name.
SCALARS = (
    ("contract", "text"),
    ("seats", "integer"),
    ("revenue", "decimal"),
    ("vip", "boolean"),
    ("renewal", "date"),
    ("signed_at", "timestamp"),
)


def define_scalars(
    client: TestClient,
    headers: dict[str, str],
    record: str,
    names: Sequence[tuple[str, str]] = SCALARS,
) -> None:
    for name, kind in names:
        define(client, headers, record=record, name=name, label=name.title(), type=kind)


def define_select(
    client: TestClient,
    headers: dict[str, str],
    record: str,
    name: str,
    labels: Sequence[str],
    *,
    multi: bool = False,
) -> dict[str, str]:
    """A select field of ``record``: its options' ids by label."""
    field = define(
        client,
        headers,
        record=record,
        name=name,
        label=name.title(),
        type="multi_select" if multi else "single_select",
        options=[{"label": label} for label in labels],
    )
    return {option["label"]: option["id"] for option in field["options"]}
