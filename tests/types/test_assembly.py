"""``assembled``: a model from known-valid values, all of its fields or an error."""

from __future__ import annotations

import pytest

from fulmen.types import LLMChoice
from fulmen.types.assembly import assembled


def test_an_assembled_model_equals_the_validated_one() -> None:
    values = {"index": 1, "text": "a", "token_ids": [3], "logprobs": [-0.5], "finish_reason": None}
    choice = assembled(LLMChoice, dict(values))
    assert choice == LLMChoice(**values)
    assert choice.model_dump_json() == LLMChoice(**values).model_dump_json()
    assert choice.model_fields_set == set(values)
    assert assembled(LLMChoice, dict(values), {"index"}).model_fields_set == {"index"}


def test_missing_or_extra_fields_are_refused() -> None:
    with pytest.raises(TypeError, match=r"missing \['finish_reason'\], extra \[\]"):
        assembled(LLMChoice, {"index": 1, "text": None, "token_ids": None, "logprobs": None})
    with pytest.raises(TypeError, match=r"extra \['other'\]"):
        fields = {"index": 1, "text": None, "token_ids": None, "logprobs": None}
        assembled(LLMChoice, fields | {"finish_reason": None, "other": 1})
