"""Held-out reward of a framework example agent (Gemma 3 270M) before and after GRPO training.

``--example`` picks ``examples/sql`` (LangGraph), ``examples/search`` (OpenAI Agents SDK),
``examples/math`` (AutoGen AgentChat), or an Agent Lightning 0.x tutorial agent run with one
changed import line, ``examples/agl_sql`` (a LangGraph ``LitAgent``) or ``examples/agl_calc``
(an AutoGen ``@agl.rollout`` function); ``--config`` one of its configs (``config.yaml``; for
sql also ``roles.yaml``, one LoRA adapter per role; for the agl examples ``gemma.yaml``, their
``config.yaml`` being the ``tiny`` CI run). It runs ``fulmen train`` in a fresh run directory
with a wall-time budget of ``--minutes`` for the GRPO steps: validation on
``--val-tasks`` held-out tasks before anything changes (the baseline, in the same run: the base
weights, greedy decoding) and after the last step. Needs an environment with the frameworks:
``pip install torch==2.13.0 -e ".[train,gemma,frameworks]"``.

It prints one JSON line: ``reward_before`` and ``reward_after`` (mean held-out reward) with
their standard errors (``stdev / sqrt(n)``), ``gain`` with the standard error of the *paired*
differences (the same tasks are scored before and after), ``gain_shown`` (the gain is at least
twice its standard error), ``n_heldout``, ``seeds`` (one run: 1), ``train_minutes`` (the GRPO
steps), ``minutes`` (the whole run, validations included), the training reward curve and the
per-role transition counts when the config has adapters, how many steps made an update, the
policy's entropy over the first and last five steps, and what the run ended serving
(``served_step``, ``reward_served``: ``validation.keep_best`` serves the best validated
version, the base model included). ``benchmarks/over_seeds.py`` runs it once per seed and
reports the mean gain over seeds.

    python benchmarks/learn_examples.py --example sql --minutes 45
    python benchmarks/learn_examples.py --example sql --config roles.yaml --minutes 45
    python benchmarks/learn_examples.py --example agl_sql --config gemma.yaml --minutes 45
    python benchmarks/learn_examples.py --example agl_calc --config gemma.yaml --minutes 45
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

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CHOICES = ("sql", "search", "math", "agl_sql", "agl_calc")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", choices=CHOICES, required=True)
    parser.add_argument("--config", default="config.yaml", help="config file in the example")
    parser.add_argument("--minutes", type=float, default=45.0, help="GRPO wall-time budget")
    parser.add_argument("--steps", type=int, default=1000, help="upper bound on GRPO steps")
    parser.add_argument("--val-tasks", type=int, default=64, help="held-out tasks to score")
    parser.add_argument("--run-dir", type=Path, default=None, help="keep the run here")
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "autogen_core", "autogen_agentchat"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix=f"fulmen-learn-{args.example}-"))
    config = load_config(
        EXAMPLES / args.example / args.config,
        overrides=[
            f"run_dir={run_dir}",
            f"validation.max_tasks={args.val_tasks}",
            f"algorithm.steps={args.steps}",
            f"algorithm.max_minutes={args.minutes}",
            f"validation.every={args.steps + 1}",
            *args.set,
        ],
    )
    started = time.monotonic()
    Trainer(config).fit()
    wall = (time.monotonic() - started) / 60
    records = read_metrics(run_dir / "metrics.jsonl")
    validations = asyncio.run(_validation_rewards(run_dir / "store.db"))
    tags = sorted(validations, key=lambda tag: int(tag.removeprefix("val")))
    before = validations[tags[0]] if tags else {}
    after = validations[tags[-1]] if len(tags) > 1 else {}
    steps = [r for r in records if r.get("time/step_s") is not None]
    result: dict[str, Any] = {
        "example": args.example,
        "config": args.config,
        **_summary("reward_before", before),
        **_summary("reward_after", after),
        **_paired_gain(before, after),
        "n_heldout": len(before),
        "seeds": 1,
        "train_minutes": round(sum(r["time/step_s"] for r in steps) / 60, 2),
        "minutes": round(wall, 2),
        "grpo_steps": len(steps),
        "reward_curve": [round(r["reward/mean"], 3) for r in steps],
        **_training_figures(steps),
        **_end_figures(records),
        "transitions_per_role": _per_role(steps),
        "run_dir": str(run_dir),
    }
    print(json.dumps(result))
    return 0


async def _validation_rewards(db: Path) -> dict[str, dict[str, float]]:
    """Each validation's reward per held-out task index, by tag (``val0``, ``val12``, ...).

    A failed rollout or one without a reward scores 0, as in the run's own validation.
    """
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    out: dict[str, dict[str, float]] = {}
    async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
        async for rollout in iter_rollouts(store, RolloutQuery(mode=Mode.VAL, limit=1000)):
            tag, task = rollout.rollout_id.split("-")[-2:]
            reward = None
            if rollout.status is RolloutStatus.SUCCEEDED:
                reward = (await load_attempt(store, rollout.rollout_id)).final_reward
            out.setdefault(tag, {})[task] = 0.0 if reward is None else reward
    return out


def _summary(name: str, rewards: dict[str, float]) -> dict[str, float | None]:
    values = list(rewards.values())
    if not values:
        return {name: None, f"{name}_se": None}
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return {name: round(statistics.fmean(values), 4), f"{name}_se": _round(se)}


def _paired_gain(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Mean per-task gain, the standard error of the paired differences, and whether it shows.

    A gain smaller than two standard errors is reported as not shown.
    """
    common = sorted(set(before) & set(after))
    if len(common) < 2:
        return {"gain": None, "gain_se": None, "gain_shown": False}
    diffs = [after[t] - before[t] for t in common]
    gain = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    return {"gain": _round(gain), "gain_se": _round(se), "gain_shown": gain >= 2 * se > 0}


def _training_figures(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """How many steps updated the policy, and its entropy over the first and last five steps.

    A step makes no update when every group scored the same; a rising entropy is a policy
    spreading out (on a sparse reward: pushed away from failures, towards nothing in particular).
    """
    entropy = [r["entropy"] for r in steps if r.get("entropy") is not None]
    return {
        "updated_steps": sum(1 for r in steps if r.get("updated") == 1.0),
        "entropy_first5": _mean(entropy[:5]),
        "entropy_last5": _mean(entropy[-5:]),
    }


def _end_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the end of the run served (``validation.keep_best``), from its ``end/*`` metrics."""
    end = next((r for r in reversed(records) if r.get("end/served_step") is not None), None)
    if end is None:
        return {}
    return {
        "served_step": int(end["end/served_step"]),
        "reward_served": _round(end["end/served_reward_mean"]),
        "kept_earlier": bool(end.get("end/kept_earlier")),
        "val_fell": bool(end.get("end/val_fell")),
    }


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def _per_role(steps: list[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for record in steps:
        for key, value in record.items():
            role, _, metric = key.partition("/")
            if metric == "transitions" and role not in ("adapter", "train", "time"):
                totals[role] = totals.get(role, 0) + int(value)
    return totals


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


if __name__ == "__main__":
    sys.exit(main())
