"""The algorithm table is the one list: the config union, dispatch, messages and help agree."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from fulmen.algorithms.registry import (
    ALGORITHMS,
    algorithm,
    names,
    no_update_reason,
    offline,
    prompt_only,
    recorded_algorithm,
    registered,
)
from fulmen.algorithms.section import AlgorithmSection
from fulmen.errors import ConfigError
from fulmen.trainer.config import AlgorithmConfig, TrainConfig


def test_the_config_union_is_built_from_the_table() -> None:
    union = typing.get_args(typing.get_args(AlgorithmConfig)[0])
    assert list(union) == [a.config_model() for a in registered()]
    assert registered()[: len(ALGORITHMS)] == ALGORITHMS


@pytest.mark.parametrize("entry", ALGORITHMS, ids=lambda a: a.name)
def test_each_row_names_its_config_and_a_run_function(entry: typing.Any) -> None:
    assert entry.config_model().model_fields["name"].default == entry.name
    assert issubclass(entry.config_model(), AlgorithmSection)
    assert callable(entry.run_function())
    assert algorithm(entry.name) is entry


def test_capabilities_are_read_from_the_table() -> None:
    assert {"apo", "demos"} == prompt_only()
    assert offline() == ("grpo", "sft", "dpo")


def test_sections_declare_what_the_trainer_asks() -> None:
    data = {"model": "tiny", "agent": "a:b", "data": {"train": "a:b"}}
    stages = [
        {"name": "sft", "sft": {"finetune": "full", "dtype": "float32"}},
        {"name": "grpo", "async": {}},
        {"name": "ppo", "untrained_agents": "base", "transitions": {"agents": ["w*"]}},
        "demos",
    ]
    sft, grpo, ppo, demos = TrainConfig.model_validate({**data, "stages": stages}).plan()
    assert [s.trains_full_weights() for s in (sft, grpo, ppo, demos)] == [1, 0, 0, 0]
    assert [s.runs_async() for s in (sft, grpo, ppo, demos)] == [0, 1, 0, 0]
    assert ppo.policy_agents() == ("w*",) and grpo.policy_agents() is None
    assert [type(s).behaviour_temperature for s in (sft, grpo, ppo, demos)] == [
        None,
        "grpo",
        "ppo",
        None,
    ]
    assert [s.max_seq_len_settings() for s in (sft, grpo, ppo, demos)] == [
        ("sft.max_seq_len", None),
        ("grpo.max_seq_len", None),
        ("ppo.max_seq_len", None),
        None,
    ]
    assert demos.transition_options() is None and sft.planned() == (3, "rounds")


def _plugin(folder: Path, row: str) -> dict[str, str]:
    """Install a distribution whose ``fulmen.algorithms`` entry point is ``row``; its env."""
    info = folder / "plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fulmen.algorithms]\nplug = {row}\n")
    (folder / "plug.py").write_text(
        "from fulmen.algorithms.registry import ALGORITHMS, Algorithm\n"
        "GRPO = ALGORITHMS[0]\n"
        "NOT_A_ROW = 3\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.getcwd()])}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("plug:GRPO", "entry point 'plug' (plug:GRPO) reuses the name 'grpo'"),
        ("plug:NOT_A_ROW", "entry point 'plug' (plug:NOT_A_ROW) is not a"),
        ("plug:MISSING", "entry point 'plug' (plug:MISSING) does not load: AttributeError"),
    ],
)
def test_a_bad_entry_point_is_named(tmp_path: Path, row: str, message: str) -> None:
    code = "from fulmen.algorithms.registry import registered\nregistered()"
    done = subprocess.run(
        [sys.executable, "-c", code], env=_plugin(tmp_path, row), capture_output=True, text=True
    )
    assert done.returncode != 0 and message in done.stderr, done.stderr


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


def test_a_step_without_update_is_explained_by_its_own_algorithm() -> None:
    flat = {"updated": 0.0, "rollouts/finished": 4.0, "transitions": 8.0, "groups": 2.0}
    flat |= {"skipped_zero_advantage": 8.0, "reward/mean": 1.0}
    assert no_update_reason("grpo", flat).startswith("every rollout in each of the 2 task groups")
    assert no_update_reason(None, flat) == no_update_reason("grpo", flat)  # the default's
    assert no_update_reason("dpo", flat) == (
        "the dpo step took no optimizer step (dpo gives no reason for it)"
    )
    assert no_update_reason("gone", flat).startswith("the gone step took no optimizer step")


def test_a_recorded_config_names_its_first_stage() -> None:
    assert recorded_algorithm({"algorithm": {"name": "ppo"}}) == "ppo"
    assert recorded_algorithm({"stages": [{"name": "sft"}, {"name": "grpo"}]}) == "sft"
    assert recorded_algorithm({"algorithm": "dpo"}) == "dpo"
    assert recorded_algorithm({}) is None
