"""The step loop the weight-updating algorithms share (``fulmen.algorithms.step_loop``).

The wall-time budget: a budget far below one step's time stops the loop after its first
step; that step is checkpointed (a resumed run starts after it) and validated as the
stage's last.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"
ALGORITHMS = {
    "grpo": "{name: grpo, steps: 50, tasks_per_step: 2, max_minutes: 0.001}",
    "ppo": "{name: ppo, steps: 50, tasks_per_step: 4, max_minutes: 0.001, ppo: {lora: {r: 4}}}",
    "dpo": "{name: dpo, steps: 50, tasks_per_step: 2, max_minutes: 0.001, dpo: {lora: {r: 4}}}",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_max_minutes_stops_after_the_step_in_progress(tmp_path: Path, name: str) -> None:
    config = load_config(
        TOY / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            f"algorithm={ALGORITHMS[name]}",
            "validation.max_tasks=4",
        ],
    )
    history = Trainer(config).fit()
    assert len(history) == 1
    checkpoints = sorted(p.name for p in (config.run_dir / "checkpoints").iterdir())
    assert checkpoints == ["step-00001"]
    state = json.loads((config.run_dir / "state.json").read_text())
    assert state["checkpoint"].endswith("step-00001"), state
    records = read_metrics(config.run_dir / "metrics.jsonl")
    validated = [r["step"] for r in records if "val/reward_mean" in r]
    assert validated == [0, 1]
