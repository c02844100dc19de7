"""The algorithm table is the one list: the config union, dispatch, messages and help agree."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest

from fulmen.algorithms.registry import ALGORITHMS, OFFLINE, PROMPT_ONLY, algorithm, names
from fulmen.errors import ConfigError
from fulmen.trainer.config import AlgorithmConfig, TrainConfig


def test_the_config_union_holds_exactly_the_tables_config_models() -> None:
    union = typing.get_args(typing.get_args(AlgorithmConfig)[0])
    assert set(union) == {a.config_model() for a in ALGORITHMS}


@pytest.mark.parametrize("entry", ALGORITHMS, ids=lambda a: a.name)
def test_each_row_names_its_config_and_a_run_function(entry: typing.Any) -> None:
    assert entry.config_model().model_fields["name"].default == entry.name
    assert callable(entry.run_function())
    assert algorithm(entry.name) is entry


def test_capabilities_are_read_from_the_table() -> None:
    assert {"apo", "demos"} == PROMPT_ONLY
    assert OFFLINE == ("grpo", "sft", "dpo")


def test_an_unknown_algorithm_is_refused_with_every_name() -> None:
    with pytest.raises(ConfigError, match="available: grpo, sft, dpo, ppo, apo, demos"):
        algorithm("a2c")
    data = {"model": "tiny", "agent": "a:b", "data": {"train": "a:b"}, "algorithm": "a2c"}
    match = r"algorithm.name 'a2c'.*available: grpo, sft, dpo, ppo, apo, demos"
    with pytest.raises(ValueError, match=match):
        TrainConfig.model_validate(data)


def test_train_help_lists_every_algorithm() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fulmen", "train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = out.split("algorithms (algorithm.name):", 1)[1].split()
    assert [name for name in names() if name in listed] == list(names())
