"""A field's definition rules: which changes of type keep every value, how a text field's
maximum may move, and that options are never lost."""

from __future__ import annotations

import itertools
import uuid

import pytest

from dealbase.platform.custom_fields.models import FieldType, Option, OptionFields
from dealbase.platform.custom_fields.rules import (
    SQL_TYPES,
    WIDENINGS,
    changed_options,
    max_length_after,
    type_change_errors,
)


@pytest.mark.parametrize(("current", "wanted"), list(itertools.product(FieldType, FieldType)))
def test_a_type_changes_only_to_itself_or_a_wider_type_of_the_same_column(
    current: FieldType, wanted: FieldType
) -> None:
    allowed = not type_change_errors(current, wanted)

    assert allowed == (current is wanted or (current, wanted) in WIDENINGS)
    if allowed:
        assert SQL_TYPES[current] == SQL_TYPES[wanted], "a change of type rewrites no row"


def test_a_text_maximum_only_grows_and_an_email_becoming_text_keeps_room_for_its_values() -> None:
    assert max_length_after(FieldType.TEXT, 40, FieldType.TEXT, 80) == 80
    assert max_length_after(FieldType.TEXT, 40, FieldType.TEXT, None) == 40
    assert [e.code for e in max_length_after(FieldType.TEXT, 40, FieldType.TEXT, 39)] == [  # type: ignore[union-attr]
        "narrowing_type"
    ]
    assert max_length_after(FieldType.EMAIL, None, FieldType.TEXT, None) == 320
    assert max_length_after(FieldType.URL, None, FieldType.TEXT, None) == 2048


def test_options_keep_their_ids_and_new_ones_get_new_ids_after_them() -> None:
    gold, silver = Option(uuid.uuid4(), "Gold", False), Option(uuid.uuid4(), "Silver", False)

    changed = changed_options(
        (gold, silver),
        [
            OptionFields(id=silver.id, label="Silver", archived=True),
            OptionFields(id=gold.id, label="Gold+"),
            OptionFields(label="Bronze"),
        ],
    )

    assert isinstance(changed, tuple)
    assert changed[:2] == (Option(silver.id, "Silver", True), Option(gold.id, "Gold+", False))
    assert changed[2].label == "Bronze" and changed[2].id not in (gold.id, silver.id)


def test_an_option_left_out_or_unknown_is_named() -> None:
    gold = Option(uuid.uuid4(), "Gold", False)
    stranger = uuid.uuid4()

    errors = changed_options((gold,), [OptionFields(id=stranger, label="Who")])

    assert isinstance(errors, list)
    assert [(e.field, e.code) for e in errors] == [
        ("options", "not_found"),
        ("options", "option_missing"),
    ]
