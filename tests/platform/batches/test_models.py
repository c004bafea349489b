"""External ids and a batch's operations, judged before anything is written."""

from __future__ import annotations

import pytest

from dealbase.errors import Invalid
from dealbase.platform.batches.models import Batch, Operation, Result, upserted_fields
from dealbase.platform.batches.service import writes_of
from dealbase.platform.customers.models import Customer, CustomerFields


@pytest.mark.parametrize(
    "external_id", [".", "..", "...", ".a", "", "a b", "a/b", "a?b", "a#b", "é", "x" * 256]
)
def test_an_external_id_a_path_cannot_carry_as_it_is_is_refused(external_id: str) -> None:
    with pytest.raises(Invalid) as refused:
        upserted_fields(CustomerFields(last_name="A"), external_id)

    assert [error.field for error in refused.value.errors] == ["external_id"]


@pytest.mark.parametrize("external_id", ["a..", "a.", "A-Z_0.9~:@!$&'()*+,;=", "x" * 255])
def test_an_external_id_of_the_documented_characters_is_taken(external_id: str) -> None:
    assert upserted_fields(CustomerFields(last_name="A"), external_id).external_id == external_id


def test_an_upsert_changes_only_the_fields_its_data_gives() -> None:
    batch = Batch(
        operations=[
            Operation(op="upsert", external_id="a", data={"last_name": "A", "city": None}),
            Operation(op="create", data={"last_name": "B", "external_id": "b"}),
        ]
    )

    failed: dict[int, Result[Customer]]
    writes, failed = writes_of(batch, CustomerFields, CustomerFields)

    assert failed == {}
    assert [(w.index, w.upsert, w.external_id, w.given) for w in writes] == [
        (0, True, "a", frozenset({"last_name", "city"})),
        (1, False, "b", frozenset({"last_name"})),
    ]
    assert writes[0].fields.external_id == "a"
