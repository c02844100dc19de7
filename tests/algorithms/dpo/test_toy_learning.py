"""End to end on CPU: the toy agent learns with ``algorithm: dpo`` through the whole stack.

Store, engine, gateway and runner as in any run; each step pairs every task group's best
rollout against its worst and the adapter is hot-loaded. The reward is the share of the
letter ``a`` in 8 tokens (multiples of 1/8), so ``min_margin`` is lowered to 0.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy"
STEPS = 12
DPO = (
    f"algorithm={{name: dpo, steps: {STEPS}, tasks_per_step: 8, group_size: 4, min_margin: 0.1, "
    "dpo: {learning_rate: 0.05, beta: 0.5, lora: {r: 8, alpha: 16}}}"
)


@pytest.mark.slow
def test_toy_agent_reward_rises_with_dpo(tmp_path: Path) -> None:
    config = load_config(
        TOY / "config.yaml",
        overrides=[f"run_dir={tmp_path / 'run'}", DPO, f"validation.every={STEPS}"],
    )
    history = Trainer(config).fit()
    assert len(history) == STEPS
    # A step whose groups all tie (a run already at the ceiling) has nothing to pair.
    assert all(h["dpo/pairs"] >= 1 for h in history if h["reward/mean"] < 0.9)
    assert all(h["dpo/groups"] == 8 for h in history)
    records = read_metrics(config.run_dir / "metrics.jsonl")
    val = [r["val/reward_mean"] for r in records if "val/reward_mean" in r]
    assert len(val) == 2  # before the first step and after the last
    first = sum(h["reward/mean"] for h in history[:3]) / 3
    last = sum(h["reward/mean"] for h in history[-3:]) / 3
    # The learning criterion is the sampled reward: seeds 0, 1, 2 alone gave (first three steps
    # -> last three) +0.57, ..., +0.16 on one machine and +0.14 at seed 0 on another (the same
    # figures each run there: the draws follow the machine's float kernels, not the load). The
    # greedy validation lags DPO's early steps: 0.19 -> 1.0, 1.0, 0.375 on the first machine,
    # 0.19 -> 0.125 on the second with the sampled reward already rising, so it is not a bar.
    assert last >= first + 0.05, f"training reward {first:.3f} -> {last:.3f}"
    trained = [h for h in history if h["updated"] == 1.0]
    assert sum(h["dpo/accuracy"] for h in trained[-3:]) / 3 > 0.5
