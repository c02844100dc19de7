"""The 0.x APO tutorial's room selector (``examples/agl_room_selector``) under ``fulmen train``.

The agent file is 0.x code with only its import changed; the config runs one round of
fulmen's ``apo`` with the ``tiny`` model as agent, critic and editor. What must hold: the
agent gets the starting prompt by its 0.x parameter name, every rollout's calls are recorded,
and the critic and editor ran on them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from tests.examples.loading import EXAMPLES, example_modules

pytest.importorskip("torch")


def test_tasks_expect_the_room_the_rules_pick() -> None:
    with example_modules("agl_room_selector", "agl_room_selector") as (module,):
        tasks = module.room_tasks()
        assert [t["expected"] for t in tasks[:4]] == ["Alder", "Maple", "Maple", "Alder"]
        assert module.grade("Book Maple.", "Maple") == 1.0
        assert module.grade("Maple or Birch", "Maple") == 0.0


@pytest.mark.slow
def test_room_selector_runs_one_apo_round(tmp_path: Path) -> None:
    config = load_config(
        EXAMPLES / "agl_room_selector" / "config.yaml", overrides=[f"run_dir={tmp_path}"]
    )
    with example_modules("agl_room_selector", "agl_room_selector"):
        (round_one,) = Trainer(config).fit()
    assert round_one["apo/rollouts"] == 4  # 2 scoring tasks + a minibatch of 2, none failed
    assert round_one["apo-critic/calls"] == 1 and round_one["apo-editor/calls"] == 1
    assert round_one["apo-critic/prompt_tokens"] > 0
