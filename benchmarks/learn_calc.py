"""Held-out accuracy of the calc agent (Gemma 3 270M + LoRA) before and after GRPO training.

Runs ``fulmen train examples/calc/config.yaml`` in a fresh run directory with a wall-time budget:
validation on the 64 held-out problems before the first step (the baseline, same run, same
greedy decoding) and after the last one. Prints one JSON line with ``accuracy_before``,
``accuracy_after``, their binomial standard errors (``sqrt(p (1 - p) / n)``), the gain and its
standard error, ``gain_shown`` (the gain is at least twice its standard error), the number of
training seeds (one run: 1), ``train_minutes``, the reward curve, the time split, and the
importance-ratio health figures (``logprob_gap``: mean |engine logprob - trainer logprob| of
the trained tokens; ``ratio_mean``), which stay near 0 and 1 when the behaviour policy the
engine sampled from is the one the trainer corrects for.

    python benchmarks/learn_calc.py --minutes 45
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

CALC = Path(__file__).resolve().parents[1] / "examples" / "calc"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=45.0, help="training wall-time budget")
    parser.add_argument("--steps", type=int, default=1000, help="upper bound on steps")
    parser.add_argument("--val-tasks", type=int, default=64, help="held-out problems to score")
    parser.add_argument("--run-dir", type=Path, default=None, help="keep the run here")
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="fulmen-learn-calc-"))
    config = load_config(
        CALC / "config.yaml",
        overrides=[
            f"run_dir={run_dir}",
            f"algorithm.steps={args.steps}",
            f"algorithm.max_minutes={args.minutes}",
            f"validation.every={args.steps + 1}",
            f"validation.max_tasks={args.val_tasks}",
            *args.set,
        ],
    )
    started = time.monotonic()
    history = Trainer(config).fit()
    wall = (time.monotonic() - started) / 60
    records = read_metrics(run_dir / "metrics.jsonl")
    val = [r for r in records if r.get("val/success") is not None]
    steps = [r for r in records if r.get("reward/mean") is not None]
    train_seconds = sum(r["time/step_s"] for r in steps)
    split = {
        key: round(sum(r.get(f"time/{key}_s", 0.0) for r in steps) / 60, 2)
        for key in ("rollout", "train", "sync")
    }
    gaps = [r["logprob_gap"] for r in steps if "logprob_gap" in r]
    ratios = [r["ratio_mean"] for r in steps if "ratio_mean" in r]
    before = val[0]["val/success"] if val else None
    after = val[-1]["val/success"] if len(val) > 1 else None
    result = {
        "accuracy_before": _round(before),
        "accuracy_before_se": _round(_binomial_se(before, args.val_tasks)),
        "accuracy_after": _round(after),
        "accuracy_after_se": _round(_binomial_se(after, args.val_tasks)),
        **_gain(before, after, args.val_tasks),
        "seeds": 1,
        "train_minutes": round(train_seconds / 60, 2),
        "steps": len(history),
        "val_tasks": args.val_tasks,
        "temperature": config.grpo_config().temperature,
        "logprob_gap_max": _significant(max(gaps, default=None)),
        "ratio_mean_range": [
            _significant(min(ratios, default=None), 7),
            _significant(max(ratios, default=None), 7),
        ],
        "reward_curve": [round(r["reward/mean"], 3) for r in steps],
        "reward_mean_first5": round(statistics.fmean(r["reward/mean"] for r in steps[:5]), 3)
        if steps
        else None,
        "reward_mean_last5": round(statistics.fmean(r["reward/mean"] for r in steps[-5:]), 3)
        if steps
        else None,
        "minutes_split": split,
        "validation_minutes": round(sum(r.get("time/val_s", 0.0) for r in val) / 60, 2),
        "wall_minutes": round(wall, 2),
        "run_dir": str(run_dir),
    }
    print(json.dumps(result))
    return 0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _significant(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else float(f"{value:.{digits}g}")


def _binomial_se(p: float | None, n: int) -> float | None:
    """Standard error of an accuracy ``p`` measured on ``n`` independent problems."""
    return None if p is None else math.sqrt(p * (1 - p) / n)


def _gain(before: float | None, after: float | None, n: int) -> dict[str, object]:
    """The accuracy gain, its standard error (two independent binomials) and whether it is shown.

    A gain smaller than two standard errors is reported as not shown.
    """
    if before is None or after is None:
        return {"gain": None, "gain_se": None, "gain_shown": False}
    se = math.sqrt(before * (1 - before) / n + after * (1 - after) / n)
    gain = after - before
    return {"gain": _round(gain), "gain_se": _round(se), "gain_shown": gain >= 2 * se > 0}


if __name__ == "__main__":
    sys.exit(main())
