"""End to end on CPU: the toy agent learns with ``algorithm.async`` (bounded staleness).

The whole stack runs (store, built-in engine, gateway, runner, adapter, GRPO); rollouts for
the next step run while the trainer updates. Checked: validation reward rises as in the
synchronous test, every trained transition is at most ``max_staleness`` updates old (the
histogram covers every trained transition), most are stale (the overlap happened) and were
importance-weighted, and no training rollout is left running when the stage ends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"
STEPS = 24


@pytest.mark.slow
def test_toy_agent_learns_asynchronously_within_the_staleness_bound(tmp_path: Path) -> None:
    config = load_config(
        TOY / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            f"algorithm.steps={STEPS}",
            f"validation.every={STEPS}",
            "algorithm.grpo.learning_rate=0.02",
            "algorithm.async={max_staleness: 1, is_cap: 2.0}",
        ],
    )
    history = Trainer(config).fit()
    assert len(history) == STEPS
    val = [
        r["val/reward_mean"]
        for r in read_metrics(config.run_dir / "metrics.jsonl")
        if "val/reward_mean" in r
    ]
    before, after = val
    assert before < 0.3
    assert after >= 0.8, f"validation reward {before:.3f} -> {after:.3f}"
    first_train = [h["reward/mean"] for h in history[:3]]
    last_train = [h["reward/mean"] for h in history[-3:]]
    # Means of three steps: one step's mean over 32 rollouts moves by about 0.03 from sampling.
    assert sum(last_train) / 3 > sum(first_train) / 3 + 0.4, (first_train, last_train)
    _check_staleness(history, max_staleness=1)
    _check_nothing_left_running(config.run_dir / "store.db")


def _check_staleness(history: list[dict[str, Any]], *, max_staleness: int) -> None:
    for h in history:
        counts = [h[f"async/staleness/{s}"] for s in range(max_staleness + 1)]
        assert sum(counts) == h["transitions"] == 32, h  # every trained one is within bound
        assert f"async/staleness/{max_staleness + 1}" not in h
        assert h["stale"] == sum(counts[1:])
        for key in ("async/dropped_transitions", "async/carried_groups", "time/wait_data_s"):
            assert h[key] >= 0, key
        assert h["time/wait_weights_s"] >= 0
        # A stale transition is trained unless its group was flat (no advantage, left out):
        # with more stale ones than were left out, at least one stale one was corrected.
        if h.get("updated") == 1.0 and h["stale"] > h.get("skipped_zero_advantage", 0):
            assert h["stale_tokens"] > 0, h
        if "stale_tokens" in h:
            assert 0 < h["is_weight_mean"] <= 2.0, h
    # the first step's rollouts are fresh; the steps after it train on rollouts that ran
    # during the previous update (one update old)
    assert history[0]["async/staleness/0"] == 32
    stale = sum(h["async/staleness/1"] for h in history[1:])
    assert stale >= 0.5 * 32 * (len(history) - 1)
    assert any(h["async/carried_groups"] > 0 for h in history)  # groups ran across steps
    assert any(h.get("stale_tokens", 0) > 0 for h in history)  # stale tokens were corrected


def _check_nothing_left_running(db: Path) -> None:
    from fulmen.store import open_store
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    async def check() -> None:
        async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
            page = await store.query_rollouts(
                RolloutQuery(
                    mode=Mode.TRAIN, statuses=[RolloutStatus.QUEUING, RolloutStatus.RUNNING]
                )
            )
            assert page.items == []

    asyncio.run(check())


def test_staleness_histogram_refuses_a_transition_past_the_bound() -> None:
    from fulmen.algorithms.grpo.async_loop import staleness_metrics

    metrics = staleness_metrics([0, 1, 1, 2], max_staleness=2)
    assert [metrics[f"async/staleness/{s}"] for s in range(3)] == [1.0, 2.0, 1.0]
    assert metrics["async/staleness_mean"] == 1.0
    with pytest.raises(ValueError, match=r"staleness 3 outside 0\.\.2"):
        staleness_metrics([0, 3], max_staleness=2)
