"""Synchronous vs asynchronous GRPO on the toy example: seconds per step and reward per wall time.

Each run trains ``examples/toy`` (tiny random model, built-in engine, the whole stack) under the
same wall-time budget (``algorithm.max_minutes``, which stops starting new steps once spent;
the stage then validates on the 16 held-out tasks). Modes alternate (sync, async, sync, ...)
so both see the same machine load. Per run: steps done, mean and median ``time/step_s``,
the held-out reward before and after, the mean training reward of the last 3 steps, and for
async the staleness, drop and wait figures. Prints ONE JSON line with the runs and the ratios
async / sync of the per-mode means (baseline: sync in the same run).

    python benchmarks/async_vs_sync.py                       # 1.5 min budget, 1 run each
    python benchmarks/async_vs_sync.py --minutes 3 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

TOY = Path(__file__).resolve().parents[1] / "examples" / "toy"
ASYNC = "algorithm.async={max_staleness: 1, is_cap: 2.0}"


def run_once(mode: str, minutes: float, run_dir: Path) -> dict[str, Any]:
    """Train the toy example in ``mode`` for ``minutes`` of steps; return its figures."""
    overrides = [
        f"run_dir={run_dir}",
        "algorithm.steps=1000",
        f"algorithm.max_minutes={minutes}",
        "algorithm.checkpoint_every=1000",
        "validation.every=1000",
    ]
    if mode == "async":
        overrides.append(ASYNC)
    config = load_config(TOY / "config.yaml", overrides=overrides)
    started = time.perf_counter()
    history = Trainer(config).fit()
    wall = time.perf_counter() - started
    val = [
        r["val/reward_mean"]
        for r in read_metrics(run_dir / "metrics.jsonl")
        if "val/reward_mean" in r
    ]
    step_s = [h["time/step_s"] for h in history]
    out: dict[str, Any] = {
        "mode": mode,
        "steps": len(history),
        "wall_s": round(wall, 1),
        "step_s_mean": round(statistics.fmean(step_s), 3),
        "step_s_median": round(statistics.median(step_s), 3),
        "val_before": val[0],
        "val_after": val[-1],
        "train_reward_last3": round(statistics.fmean(h["reward/mean"] for h in history[-3:]), 3),
        "train_s_total": round(sum(h["time/train_s"] for h in history), 1),
        "rollout_s_total": round(sum(h["time/rollout_s"] for h in history), 1),
    }
    if mode == "async":
        out.update(
            {
                key.split("/", 1)[1] + "_total": round(sum(h.get(key, 0.0) for h in history), 1)
                for key in (
                    "async/staleness/0",
                    "async/staleness/1",
                    "async/dropped_transitions",
                    "time/wait_data_s",
                    "time/wait_weights_s",
                )
            }
        )
    return out


def main() -> None:
    """Alternate sync and async runs under one budget; print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=1.5, help="wall-time budget per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for mode in ("sync", "async"):
                runs.append(run_once(mode, args.minutes, Path(tmp) / f"{mode}{i}"))
                print(json.dumps(runs[-1]), file=sys.stderr)

    def mean(mode: str, key: str) -> float:
        return statistics.fmean(r[key] for r in runs if r["mode"] == mode)

    keys = ("steps", "step_s_mean", "step_s_median", "val_after", "train_reward_last3")
    summary = {f"{m}_{k}": round(mean(m, k), 3) for m in ("sync", "async") for k in keys}
    ratios = {
        "async_over_sync_step_s_mean": round(
            mean("async", "step_s_mean") / mean("sync", "step_s_mean"), 3
        ),
        "async_over_sync_steps": round(mean("async", "steps") / mean("sync", "steps"), 3),
    }
    print(
        json.dumps(
            {
                "benchmark": "async_vs_sync",
                "minutes": args.minutes,
                **summary,
                **ratios,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
