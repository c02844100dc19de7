"""fulmen's side of the race: ``fulmen train`` on a config written for the run."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from race.child import run_child
from race.settings import environment


def run_fulmen(args: argparse.Namespace, dataset: str, lr: float, seed: int, run: Path) -> None:
    """Train with ``fulmen train`` for the budget; adapters land in ``run/adapters``."""
    import yaml

    steps = args.max_steps or 1_000_000
    config = {
        "model": args.model,
        "run_dir": str(run),
        "seed": seed,
        "environment": {**environment(args, dataset), "val_size": 0},
        "engine": {"max_batch": args.tasks_per_step * args.group_size},
        "rollouts": {
            "concurrency": args.tasks_per_step * args.group_size,
            "train_sampling": {"temperature": 1.0, "max_tokens": args.completion_length},
        },
        "algorithm": {
            "steps": steps,
            "tasks_per_step": args.tasks_per_step,
            "group_size": args.group_size,
            "max_minutes": None if args.max_steps else args.budget_min,
            "grpo": {
                "learning_rate": lr,
                "lora": {
                    "r": args.lora_r,
                    "alpha": 2 * args.lora_r,
                    "target_modules": args.lora_targets.split(","),
                },
            },
        },
    }
    run.mkdir(parents=True, exist_ok=True)
    (run / "race.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = [sys.executable, "-m", "fulmen", "train", str(run / "race.yaml")]
    argv += [arg for override in args.fulmen_set for arg in ("--set", override)]
    run_child(argv, stdout=subprocess.DEVNULL)


def fulmen_checkpoints(
    run: Path, group_size: int
) -> tuple[list[tuple[float, Path]], dict[str, float]]:
    """(seconds since the first step began, adapter) per step, and the run's throughput.

    The throughput carries the run's group counts (``run_sampling``), so that a later
    ``--versus`` comparison reads them from the results alone, without the run's folder.
    """
    steps = step_rows(run)
    start = steps[0]["time"] - steps[0]["time/step_s"]
    points = [(r["time"] - start, run / "adapters" / f"step-{int(r['step']):05d}") for r in steps]
    rollout_s = sum(r["time/rollout_s"] for r in steps)
    return points, {
        "steps": len(steps),
        "rollout_tokens_per_s": completion_tokens(run) / rollout_s,
        "update_s_per_step": statistics.fmean(r["time/train_s"] for r in steps),
        **run_sampling(steps, group_size),
    }


def run_sampling(steps: list[dict[str, Any]], group_size: int) -> dict[str, float]:
    """Groups a run's ``steps`` (``step_rows``) ran, how many were flat, and its rollouts.

    A flat group's rewards were all equal. A run with dynamic sampling reports its groups and
    rollouts (``sampling/…``); one without counts a flat group's samples as left out for want
    of advantage, a group at a time. A sample is one model call, so an agent that calls the
    model several times a rollout leaves out that many samples per rollout of a flat group:
    the step's transitions over its rollouts.
    """
    groups = flat = rollouts = 0.0
    for r in steps:
        if "sampling/groups" in r:
            groups += r["sampling/groups"]
            flat += r["sampling/flat_groups"]
            rollouts += r["sampling/rollouts"]
        else:
            groups += r["groups"]
            per_rollout = r["transitions"] / r["rollouts"] if r.get("transitions") else 1.0
            flat += r["skipped_zero_advantage"] / (group_size * per_rollout)
            rollouts += r["rollouts"]
    return {"groups": groups, "flat_groups": flat, "rollouts": rollouts}


def step_rows(run: Path) -> list[dict[str, Any]]:
    """The run's step rows of ``metrics.jsonl``."""
    from fulmen.trainer.metrics import read_metrics

    return [r for r in read_metrics(run / "metrics.jsonl") if "time/step_s" in r]


def completion_tokens(run: Path) -> int:
    """Every completion token the run's training rollouts generated, from its store.

    Counted from the recorded calls, not from what was trained: a step whose groups all
    scored alike trains nothing but generated as much.
    """
    import asyncio

    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts, read_llm_calls
    from fulmen.trainer.config import RUN_STORE_FILE
    from fulmen.types import Mode, RolloutQuery

    async def count() -> int:
        total = 0
        async with open_store(f"sqlite:///{run / RUN_STORE_FILE}", watchdog_interval=None) as store:
            async for rollout in iter_rollouts(store, RolloutQuery(mode=Mode.TRAIN, limit=1000)):
                for call in await read_llm_calls(store, rollout.rollout_id):
                    total += sum(len(choice.token_ids or []) for choice in call.choices)
        return total

    return asyncio.run(count())
