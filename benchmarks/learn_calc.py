"""Held-out accuracy of the calc agent (Gemma 3 270M) before and after one way of improving it.

``--algorithm`` picks the config in ``examples/calc/``: ``rl`` (``config.yaml``: GRPO with a
LoRA), ``demos`` (``demos.yaml``: few-shot demonstrations bootstrapped from the model's own
runs), ``sft`` (``sft.yaml``: rejection sampling + fine-tuning) or ``chain`` (``chain.yaml``:
demos, then GRPO). Each runs ``fulmen train`` in a fresh run directory: validation on the 64
held-out problems before anything changes (the baseline: the calc prompt as shipped with its
three hand-written examples, the base weights, greedy decoding, in the same run) and after the
last stage. Prints one JSON line with ``accuracy_before``, ``accuracy_after``, their binomial
standard errors (``sqrt(p (1 - p) / n)``), the gain and its standard error, ``gain_shown`` (the
gain is at least twice its standard error), ``paired_gain`` / ``paired_gain_se`` /
``paired_gain_shown`` (the same problems scored twice: the standard error of the per-problem
differences, read from the run's store), the number of seeds (one run: 1), ``minutes`` (wall
time of the whole run, validations included) and per algorithm its own figures: GRPO's reward
curve, time split and importance-ratio health (``logprob_gap``: mean |engine logprob - trainer
logprob| of the trained tokens; ``ratio_mean``); SFT's kept fraction and the mean logprob of the
kept completions before/after each round; what the run ended serving (``served_step``,
``reward_served``: ``validation.keep_best``). ``benchmarks/over_seeds.py`` runs it once per
seed and reports the mean gain over seeds.

``--agent js`` (``--algorithm rl`` only) trains ``examples/calc_js/config.yaml`` instead: the
same agent written in JavaScript and run as a command agent, with the same training settings;
the JSON line names the ``agent``.

    python benchmarks/learn_calc.py --algorithm rl --minutes 45
    python benchmarks/learn_calc.py --agent js --minutes 40
    python benchmarks/learn_calc.py --algorithm sft
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from learn_examples import _end_figures, _paired_gain, _training_figures, _validation_rewards

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
AGENTS = {"python": EXAMPLES / "calc", "js": EXAMPLES / "calc_js"}  # the agent's folder
CONFIGS = {"rl": "config.yaml", "demos": "demos.yaml", "sft": "sft.yaml", "chain": "chain.yaml"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=sorted(CONFIGS), default="rl")
    parser.add_argument(
        "--agent",
        choices=sorted(AGENTS),
        default="python",
        help="the calc agent: examples/calc (python) or examples/calc_js (js, --algorithm rl only)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="GRPO wall-time budget (rl: default 45; chain: of its GRPO stage; others: unused)",
    )
    parser.add_argument("--steps", type=int, default=1000, help="upper bound on GRPO steps (rl)")
    parser.add_argument("--val-tasks", type=int, default=64, help="held-out problems to score")
    parser.add_argument("--run-dir", type=Path, default=None, help="keep the run here")
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    args = parser.parse_args()
    if args.agent != "python" and args.algorithm != "rl":
        parser.error(
            f"--agent {args.agent} runs only with --algorithm rl: the {args.algorithm} config "
            "exists only for the Python agent (examples/calc/)"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix=f"fulmen-learn-calc-{args.algorithm}-"))
    config = load_config(
        AGENTS[args.agent] / CONFIGS[args.algorithm],
        overrides=[
            f"run_dir={run_dir}",
            f"validation.max_tasks={args.val_tasks}",
            *_budget(args),
            *args.set,
        ],
    )
    started = time.monotonic()
    Trainer(config).fit()
    wall = (time.monotonic() - started) / 60
    records = read_metrics(run_dir / "metrics.jsonl")
    val = [r for r in records if r.get("val/success") is not None]
    before = val[0]["val/success"] if val else None
    after = val[-1]["val/success"] if len(val) > 1 else None
    per_task = asyncio.run(_validation_rewards(run_dir / "store.db"))
    tags = sorted(per_task, key=lambda tag: int(tag.removeprefix("val")))
    paired = _paired_gain(per_task[tags[0]], per_task[tags[-1]]) if len(tags) > 1 else {}
    result: dict[str, Any] = {
        "algorithm": args.algorithm,
        "agent": args.agent,
        "accuracy_before": _round(before),
        "accuracy_before_se": _round(_binomial_se(before, args.val_tasks)),
        "accuracy_after": _round(after),
        "accuracy_after_se": _round(_binomial_se(after, args.val_tasks)),
        **_gain(before, after, args.val_tasks),
        # the same held-out problems scored before and after: the paired standard error
        **{f"paired_{key}": value for key, value in paired.items()},
        "seeds": 1,
        "minutes": round(wall, 2),
        "validation_minutes": round(sum(r.get("time/val_s", 0.0) for r in val) / 60, 2),
        "val_tasks": args.val_tasks,
        **_grpo_figures(records),
        **_sft_figures(records),
        **_end_figures(records),
        "run_dir": str(run_dir),
    }
    print(json.dumps(result))
    return 0


def _budget(args: argparse.Namespace) -> list[str]:
    """The overrides that bound GRPO's wall time and steps, where the algorithm has GRPO."""
    if args.algorithm == "rl":
        minutes = 45.0 if args.minutes is None else args.minutes
        return [
            f"algorithm.steps={args.steps}",
            f"algorithm.max_minutes={minutes}",
            f"validation.every={args.steps + 1}",
        ]
    if args.algorithm == "chain" and args.minutes is not None:
        return [f"stages.1.steps={args.steps}", f"stages.1.max_minutes={args.minutes}"]
    return []


def _grpo_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    steps = [r for r in records if r.get("time/step_s") is not None]
    if not steps:
        return {}
    gaps = [r["logprob_gap"] for r in steps if r.get("logprob_gap") is not None]
    ratios = [r["ratio_mean"] for r in steps if r.get("ratio_mean") is not None]
    return {
        "grpo_steps": len(steps),
        "train_minutes": round(sum(r["time/step_s"] for r in steps) / 60, 2),
        "minutes_split": {
            key: round(sum(r.get(f"time/{key}_s", 0.0) for r in steps) / 60, 2)
            for key in ("rollout", "train", "sync")
        },
        "logprob_gap_max": _significant(max(gaps, default=None)),
        "ratio_mean_range": [
            _significant(min(ratios, default=None), 7),
            _significant(max(ratios, default=None), 7),
        ],
        "reward_curve": [round(r["reward/mean"], 3) for r in steps],
        **_training_figures(steps),
        "reward_mean_first5": round(statistics.fmean(r["reward/mean"] for r in steps[:5]), 3),
        "reward_mean_last5": round(statistics.fmean(r["reward/mean"] for r in steps[-5:]), 3),
    }


def _sft_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    rounds = [r for r in records if r.get("sft/kept_fraction") is not None]
    if not rounds:
        return {}
    return {
        "sft_rounds": len(rounds),
        "sft_kept_fraction": [round(r["sft/kept_fraction"], 3) for r in rounds],
        "sft_examples": [int(r["sft/examples"]) for r in rounds],
        "sft_retokenized": [int(r["sft/retokenized"]) for r in rounds],
        "sft_loss": [_significant(r.get("loss")) for r in rounds],
        "sft_logprob_before": [_significant(r.get("sft/logprob_before")) for r in rounds],
        "sft_logprob_after": [_significant(r.get("sft/logprob_after")) for r in rounds],
        "sft_train_minutes": round(sum(r.get("sft/train_s", 0.0) for r in rounds) / 60, 2),
    }


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
