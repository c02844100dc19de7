"""Runs side by side: what their configs change, where they ended, and whether it differs.

``compare_runs`` reads two or more runs from one store: the keys of their recorded configs
that differ (flattened to ``key.path``), each run's final validation (its mean over the tasks
scored, with the standard error over tasks), steps, training minutes and step-time split, and,
for every run after the first, the paired comparison against the first on the validation tasks
both final validations scored (``fulmen.debugging.stats.compare_paired``: the mean difference,
its 95% CI and the paired tests). A final validation's per-task rewards are read from the
run's validation rollouts in the store (rollout ids carry the validation's step tag); a failed
validation rollout has no reward and is left out of both the mean and the pairing.
``comparison_json`` turns the result into plain JSON data (the dashboard's comparison view).
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fulmen.config_file import flatten
from fulmen.debugging.stats import PairedComparison, compare_paired
from fulmen.errors import ConfigError
from fulmen.store.base import Store
from fulmen.store.reading import read_run_metrics
from fulmen.types import Mode, RolloutQuery, RolloutStatus, Run

__all__ = [
    "RunSummary",
    "RunsComparison",
    "compare_located_runs",
    "compare_runs",
    "comparison_json",
    "config_diff",
]

# ``{run_id}-g{generation}[-st{stage}]-val{step}-t{task}``: see ``StageRollouts.run``.
_VALIDATION_ID = re.compile(r"-val(?P<step>\d+)-t\d+$")


@dataclass(frozen=True)
class RunSummary:
    """One run's outcome.

    Attributes:
        run: the run as the store holds it.
        final: the mean reward of its last validation over the tasks it scored (``None``: it
            did not validate).
        final_se: its standard error over those tasks (``stdev / sqrt(n)``).
        rewards: that validation's reward per task id (failed rollouts left out).
        steps: training steps recorded.
        train_minutes: summed step time.
        split: share of step time in rollouts, the update and the weight sync.
    """

    run: Run
    final: float | None
    final_se: float | None
    rewards: Mapping[str, float]
    steps: int
    train_minutes: float
    split: Mapping[str, float] = field(default_factory=dict[str, float])


@dataclass(frozen=True)
class RunsComparison:
    """Each run's summary, the config keys that differ, and each run against the first."""

    runs: tuple[RunSummary, ...]
    differences: Mapping[str, tuple[Any, ...]]
    paired: Mapping[str, PairedComparison | None]


def config_diff(configs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Return the flattened keys whose values differ between ``configs`` (missing: ``None``).

    ``run_dir`` differs between any two runs and says nothing: it is left out.
    """
    flat = [flatten(c) for c in configs]
    out: dict[str, tuple[Any, ...]] = {}
    for key in sorted({k for f in flat for k in f} - {"run_dir"}):
        values = tuple(f.get(key) for f in flat)
        if len({repr(v) for v in values}) > 1:
            out[key] = values
    return out


async def compare_runs(store: Store, run_ids: Sequence[str]) -> RunsComparison:
    """Compare the runs ``run_ids`` (two or more) of ``store`` (see the module docstring)."""
    return await compare_located_runs([(store, run_id) for run_id in run_ids])


async def compare_located_runs(runs: Sequence[tuple[Store, str]]) -> RunsComparison:
    """Compare runs that may sit in different stores: ``(store, run_id)`` each, two or more.

    Each run is summarized from its own store (``fulmen runs compare runs/a runs/b`` reads two
    run folders); the first is the one the others are paired against, as in ``compare_runs``.
    """
    if len(runs) < 2:
        raise ConfigError(f"compare needs at least two runs, got {len(runs)}")
    summaries = tuple([await _summary(store, run_id) for store, run_id in runs])
    first = summaries[0]
    paired: dict[str, PairedComparison | None] = {}
    for other in summaries[1:]:
        shared = sorted(set(first.rewards) & set(other.rewards))
        paired[other.run.run_id] = (
            compare_paired([first.rewards[t] for t in shared], [other.rewards[t] for t in shared])
            if len(shared) >= 2
            else None
        )
    differences = config_diff([s.run.config for s in summaries])
    return RunsComparison(runs=summaries, differences=differences, paired=paired)


def comparison_json(result: RunsComparison) -> dict[str, Any]:
    """Return ``result`` as JSON data: what ``fulmen runs compare --json`` prints, and more.

    Each run adds its ``name``, ``status``, ``started_at`` and ``ended_at``; ``first`` names the
    run the others are paired against, and ``paired`` holds every field of
    ``PairedComparison`` (``None`` where fewer than two validation tasks were scored by both).
    Config values are kept as the store holds them (JSON already).
    """
    return {
        "first": result.runs[0].run.run_id,
        "runs": [
            {
                "run_id": s.run.run_id,
                "name": s.run.name,
                "status": s.run.status.value,
                "started_at": s.run.started_at,
                "ended_at": s.run.ended_at,
                "final": s.final,
                "final_se": s.final_se,
                "tasks": len(s.rewards),
                "steps": s.steps,
                "train_minutes": s.train_minutes,
                "split": dict(s.split),
            }
            for s in result.runs
        ],
        "differences": {k: list(v) for k, v in result.differences.items()},
        "paired": {
            k: None if c is None else dataclasses.asdict(c) for k, c in result.paired.items()
        },
    }


async def _summary(store: Store, run_id: str) -> RunSummary:
    run = await store.get_run(run_id)
    records = [m.values for m in await read_run_metrics(store, run_id)]
    steps = [r for r in records if r.get("time/step_s") is not None]
    total = sum(r["time/step_s"] for r in steps)
    split = (
        {
            name: sum(r.get(f"time/{key}_s", 0.0) for r in steps) / total
            for name, key in (("rollouts", "rollout"), ("update", "train"), ("sync", "sync"))
        }
        if total > 0
        else {}
    )
    rewards = await _final_validation(store, run_id)
    values = list(rewards.values())
    final = statistics.fmean(values) if values else None
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return RunSummary(
        run=run,
        final=final,
        final_se=se,
        rewards=rewards,
        steps=len(steps),
        train_minutes=total / 60,
        split=split,
    )


async def _final_validation(store: Store, run_id: str) -> dict[str, float]:
    """Return the last validation's reward per task id (the validation enqueued last)."""
    from fulmen.store.reading import iter_rollouts
    from fulmen.transitions.trajectory import load_attempt

    latest: dict[str, list[Any]] = {}
    last_position = -1
    last_tag = None
    query = RolloutQuery(mode=Mode.VAL, limit=500)
    async for rollout in iter_rollouts(store, query):
        match = _VALIDATION_ID.search(rollout.rollout_id)
        if not rollout.rollout_id.startswith(f"{run_id}-") or match is None:
            continue
        tag = rollout.rollout_id[: match.start()] + f"-val{match.group('step')}"
        latest.setdefault(tag, []).append(rollout)
        if rollout.position > last_position:
            last_position, last_tag = rollout.position, tag
    out: dict[str, float] = {}
    for rollout in latest.get(last_tag, []) if last_tag is not None else []:
        if rollout.status is not RolloutStatus.SUCCEEDED or rollout.task_id is None:
            continue
        reward = (await load_attempt(store, rollout.rollout_id)).final_reward
        if reward is not None:
            out[rollout.task_id] = reward
    return out
