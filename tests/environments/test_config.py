"""The ``environment:`` section: what it implies for the rest of a config, what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fulmen.environments.config import ENVIRONMENT_SOURCE, EnvironmentAdapter
from fulmen.errors import ConfigError
from fulmen.trainer.config import TrainConfig, load_config


def _config(tmp_path: Path, **raw: object) -> TrainConfig:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", **raw}), encoding="utf-8")
    return load_config(path)


def test_section_brings_its_agent_and_both_splits(tmp_path: Path) -> None:
    config = _config(tmp_path, environment={"library": "reasoning_gym", "dataset": "chain_sum"})
    assert config.agent == "fulmen.environments.reasoning_gym:ReasoningGymAgent"
    assert (config.data.train, config.data.val) == (ENVIRONMENT_SOURCE, ENVIRONMENT_SOURCE)
    assert config.environment is not None and config.environment.library == "reasoning_gym"


def test_own_agent_is_kept_and_no_held_out_split_without_val_size(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        agent="my_agent:solve",
        environment={"library": "textarena", "game": "Nim-v0", "val_size": 0},
    )
    assert config.agent == "my_agent:solve"
    assert (config.data.train, config.data.val) == (ENVIRONMENT_SOURCE, None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"data": {"train": "tasks.jsonl"}}, r"data.train '\S*tasks.jsonl' with environment"),
        ({"data": {"from_store": "sqlite:///x.db"}}, "data.from_store trains offline"),
    ],
)
def test_other_task_sources_are_refused(tmp_path: Path, raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, environment={"library": "reasoning_gym", "dataset": "x"}, **raw)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"library": "reasoning_gym"}, "either dataset .one. or datasets"),
        (
            {"library": "reasoning_gym", "dataset": "a", "datasets": {"b": {}}},
            "either dataset",
        ),
        (
            {"library": "reasoning_gym", "datasets": {"b": {}}, "config": {"x": 1}},
            "go under each entry",
        ),
        (
            {"library": "reasoning_gym", "dataset": "a", "config": {"seed": 3}},
            r"config.seed is set by fulmen",
        ),
        ({"library": "reasoning_gym", "dataset": "a", "train_size": 0}, "greater than or equal"),
        ({"library": "reasoning_gym", "dataset": "a", "seed": 2**40}, "less than or equal"),
        ({"library": "openenv"}, "either url .a running server. or command"),
        ({"library": "openenv", "command": ["serve"]}, "port somewhere as {port}"),
        ({"library": "verifiers", "env": {}}, "verifiers.env.taskset.id"),
        ({"library": "textarena", "game": "Nim-v0", "unknown": 1}, "Extra inputs"),
        ({"library": "gym", "game": "x"}, "does not match any of the expected tags"),
    ],
)
def test_bad_sections_name_the_problem(section: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EnvironmentAdapter.validate_python(section)


@pytest.mark.parametrize("seed", [0, 1, 2**31 - 1])
def test_episode_seeds_of_the_two_splits_are_disjoint_32_bit_seeds(seed: int) -> None:
    section = EnvironmentAdapter.validate_python(
        {"library": "textarena", "game": "Nim-v0", "seed": seed}
        | {"train_size": 1_000_000, "val_size": 1_000_000}
    )
    train, val = section.episode_seeds("train"), section.episode_seeds("val")
    assert (len(train), len(val)) == (1_000_000, 1_000_000)
    assert val.stop == train.start  # adjacent ranges: no seed in both
    assert val.start >= 0 and train.stop <= 2**31
    assert section.episode_seeds("val") == val  # the same section seed draws the same seeds
