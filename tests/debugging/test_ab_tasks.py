"""``fulmen ab`` and ``fulmen models compare`` read a config's tasks as training does.

An ``environment:`` section sets ``data.train``/``data.val`` to ``environment``; the A/B stack
used to hand that word to the task-file loader ("cannot read tasks from environment").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.trainer.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reasoning_gym" / "config.yaml"


def test_the_ab_stack_takes_an_environments_split(tmp_path: Path) -> None:
    pytest.importorskip("reasoning_gym")
    from fulmen.debugging.ab import config_stack
    from fulmen.environments.tasks import environment_tasks

    config = load_config(EXAMPLE, overrides=[f"run_dir={tmp_path / 'run'}"])
    assert config.environment is not None and config.data.val == "environment"
    _, val = config_stack(config, n=3, split="val", log_dir="ab")
    _, train = config_stack(config, n=3, split="train", log_dir="ab")
    assert [task for _, task in val] == environment_tasks(config.environment, "val")[:3]
    assert [task for _, task in train] == environment_tasks(config.environment, "train")[:3]
    assert {str(t["question"]) for _, t in val}.isdisjoint(str(t["question"]) for _, t in train)
