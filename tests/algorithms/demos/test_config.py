"""``algorithm: demos`` settings: dead options and bad references are errors that name them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config

BASE = "model: tiny\nagent: a:b\ndata: {train: a:t}\n"


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ("{name: demos, demos: 5, pool: 3}", "demos (5) is more than pool (3)"),
        ("{name: demos, collect_rollouts: 0, collect_mode: train}", "collect_mode has no effect"),
        ("{name: demos, initial: not-a-spec}", "algorithm.initial: String should match"),
        ("{name: demos, tidy: agent}", "algorithm.tidy: String should match"),
    ],
)
def test_bad_demos_settings_are_named(tmp_path: Path, algorithm: str, message: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(BASE + f"algorithm: {algorithm}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(config)


def test_initial_and_tidy_must_name_what_they_say(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(BASE + "algorithm: {name: demos, initial: 'os:sep', tidy: 'os:sep'}\n")
    demos = load_config(config).algorithm
    with pytest.raises(
        ConfigError, match=re.escape("algorithm.initial 'os:sep' is a str, not a fulmen")
    ):
        demos.initial_prompt()  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=re.escape("algorithm.tidy 'os:sep' is not callable")):
        demos.tidy_function()  # type: ignore[union-attr]
