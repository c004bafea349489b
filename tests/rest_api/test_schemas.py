"""The wire models' documented examples are responses the models themselves accept."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from dealbase.rest_api.schemas import ActivityOut, CustomerOut, DealOut, Problem


@pytest.mark.parametrize("model", [CustomerOut, DealOut, ActivityOut, Problem])
def test_documented_examples_validate_against_their_model(model: type[BaseModel]) -> None:
    examples = model.model_json_schema(mode="serialization")["examples"]

    assert examples
    for example in examples:
        assert model.model_validate(example).model_dump(mode="json") == example
