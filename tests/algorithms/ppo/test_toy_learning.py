"""End to end on CPU: the toy agent learns with ``algorithm: ppo`` and no groups.

Store, engine, gateway and runner as in any run; every rollout is its own task (group size 1),
so the only baseline is the value head's. The reward is the share of the letter ``a`` in 8
tokens; each step is 32 one-call rollouts, GAE over them, two epochs of the clipped losses.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy"
STEPS = 12
PPO = (
    f"algorithm={{name: ppo, steps: {STEPS}, tasks_per_step: 32, group_size: 1, "
    "ppo: {learning_rate: 0.02, value_learning_rate: 0.002, lora: {r: 8, alpha: 16}}}"
)


@pytest.mark.slow
def test_toy_agent_reward_rises_with_ppo(tmp_path: Path) -> None:
    config = load_config(
        TOY / "config.yaml",
        overrides=[f"run_dir={tmp_path / 'run'}", PPO, f"validation.every={STEPS}"],
    )
    history = Trainer(config).fit()
    assert len(history) == STEPS
    assert all(h["updated"] == 1.0 and h["ppo/calls"] == 32 for h in history)
    records = read_metrics(config.run_dir / "metrics.jsonl")
    val = [r["val/reward_mean"] for r in records if "val/reward_mean" in r]
    before, after = val[0], val[-1]
    first = sum(h["reward/mean"] for h in history[:3]) / 3
    last = sum(h["reward/mean"] for h in history[-3:]) / 3
    # seeds 0, 1, 2, 3 alone: validation 0.19 -> 1.00, 1.00, 0.51, 0.99; training (first
    # three steps -> last three) +0.20, +0.70, +0.19, +0.17. Sampling differs under load, so
    # the bars stay low.
    assert last >= first + 0.05, f"training reward {first:.3f} -> {last:.3f}"
    assert after >= before + 0.125, f"validation reward {before:.3f} -> {after:.3f}"
    # the critic follows the returns up from 0: mean value of the last three steps 0.30, 0.64,
    # 0.30, 0.25 on those seeds (against first-step rewards of 0.12-0.20, too close to compare)
    assert abs(history[0]["ppo/value_mean"]) < 0.01
    value = sum(h["ppo/value_mean"] for h in history[-3:]) / 3
    assert 0.1 < value < 1.0, f"value {value:.3f}, first rewards {first:.3f}"
    assert all(math.isfinite(h["ppo/value_loss"]) for h in history)
