"""The one rule for which request fields change the sampled distribution, and its users."""

from __future__ import annotations

import doctest
import re
from typing import Any

import pytest
from pydantic import ValidationError

import fulmen.types.behaviour as behaviour
from fulmen.types import LLMResource, Mode
from fulmen.types.behaviour import (
    CONSTRAINT_FIELDS,
    DISTRIBUTION_FIELDS,
    forced_fields,
    is_neutral,
    off_behaviour_reason,
    refused_field,
    reshaped_fields,
)


def test_module_examples() -> None:
    assert doctest.testmod(behaviour).failed == 0


def test_forced_values_are_neutral_and_explicit() -> None:
    forced = forced_fields()
    assert set(forced) == set(DISTRIBUTION_FIELDS)
    assert reshaped_fields(forced) == []
    # vLLM's "off" for top_k, which the built-in engine accepts too
    assert forced["top_k"] == -1 and forced["top_p"] == 1.0 and forced["logit_bias"] is None


def test_trainer_config_reads_the_same_table() -> None:
    from fulmen.algorithms.behaviour import DISTRIBUTION_FIELDS as trainer_fields

    assert trainer_fields is DISTRIBUTION_FIELDS


@pytest.mark.parametrize(
    ("value", "neutral", "expected"),
    [
        (1, (1.0,), True),
        (True, (1.0, 1), False),  # a boolean is not a number here
        (False, (False,), True),
        ([], ((),), True),
        ({"type": "text"}, ({"type": "text"},), True),
        ({"type": "json_object"}, ({"type": "text"},), False),
    ],
)
def test_is_neutral(value: Any, neutral: tuple[Any, ...], expected: bool) -> None:
    assert is_neutral(value, neutral) is expected


def test_reshaped_and_refused_fields() -> None:
    body = {"top_k": 20, "top_p": 1, "min_p": None, "logit_bias": {}, "tool_choice": "auto"}
    assert reshaped_fields(body) == ["top_k"]
    assert refused_field(body) is None
    assert refused_field({"text": {"format": {"type": "json_object"}}}) == "text.format"
    assert refused_field({"text": {"format": {"type": "text"}, "verbosity": "low"}}) is None
    assert refused_field({"text": "not an object"}) is None
    assert refused_field({"min_tokens": 3, "tool_choice": "required"}) == "tool_choice"
    assert set(CONSTRAINT_FIELDS) >= {"response_format", "guided_json", "structured_outputs"}


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        ({"model": "m"}, None),  # unset: 1.0, no truncation
        ({"temperature": 1, "top_p": 1.0, "top_k": -1, "n": 4, "seed": 3}, None),
        ({"temperature": 0.7}, "temperature=0.7 differs from the trainer's 1.0"),
        ({"temperature": 0}, "temperature=0 differs"),
        ({"temperature": "hot"}, "temperature='hot' differs"),
        ({"top_p": 0.9}, "top_p=0.9 truncates or reshapes"),
        ({"presence_penalty": 0.4}, "presence_penalty=0.4 truncates"),
        ({"response_format": {"type": "json_object"}}, "response_format=.* constrains decoding"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format=.* constrains decoding"),
    ],
)
def test_off_behaviour_reason(request_: dict[str, Any], reason: str | None) -> None:
    found = off_behaviour_reason(request_, temperature=1.0)
    if reason is None:
        assert found is None
    else:
        assert found is not None and re.match(reason, found), found


def test_off_behaviour_reason_compares_the_trainers_temperature() -> None:
    assert off_behaviour_reason({"temperature": 0.8}, temperature=0.8) is None
    assert (
        off_behaviour_reason({}, temperature=0.8)
        == "temperature=1.0 differs from the trainer's 0.8"
    )


def llm(sampling: dict[str, Any], modes: tuple[Mode, ...] = (Mode.TRAIN,)) -> LLMResource:
    return LLMResource(base_url="http://e/v1", model="m", sampling=sampling, behaviour_modes=modes)


def test_request_fields_force_neutral_values_only_in_behaviour_modes() -> None:
    resource = llm({"default": {"max_tokens": 9}, "train": {"temperature": 0.8}, "val": {}})
    assert resource.samples_behaviour("train") and not resource.samples_behaviour("val")
    assert resource.request_fields("train") == {
        "max_tokens": 9,
        "temperature": 0.8,
        **forced_fields(),
    }
    assert resource.request_fields("val") == {"max_tokens": 9}


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({}, "must set temperature > 0"),
        ({"train": {"temperature": 0.0}}, "must set temperature > 0"),
        ({"train": {"temperature": True}}, "must set temperature > 0"),
        ({"default": {"top_k": 5}, "train": {"temperature": 1.0}}, "sets top_k, which changes"),
        ({"train": {"temperature": 1.0, "guided_regex": "a"}}, "sets guided_regex"),
    ],
)
def test_a_behaviour_mode_with_a_reshaping_sampling_is_refused(
    sampling: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        llm(sampling)


def test_resources_stored_before_behaviour_modes_still_read() -> None:
    stored = {"kind": "llm", "base_url": "http://e/v1", "model": "m", "sampling": {"train": {}}}
    resource = LLMResource.model_validate(stored)
    assert resource.behaviour_modes == () and resource.request_fields("train") == {}
    again = LLMResource.model_validate_json(llm({"train": {"temperature": 1.0}}).model_dump_json())
    assert again.behaviour_modes == (Mode.TRAIN,)
