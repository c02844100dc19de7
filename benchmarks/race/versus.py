"""One fulmen setting against fulmen's runs of another race: the paired gain and what it cost.

The sparse-reward remedies (``algorithm.dynamic_sampling``) are measured this way: the race run
again with ``--fulmen-set`` into an ``OUT`` of its own and ``--versus BASE`` naming the race run
without it, with every other setting the same. Each seed's run is paired with the base's run of
that seed (the same tasks drawn in the same order at the first draw, the same held-out set).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from race.records import read_results, recorded_settings, settings_differ
from race.settings import SETTINGS
from race.summary import mean_se, paired_gain

#: The settings a versus comparison may change: what fulmen's runs were given, and TRL's.
MAY_DIFFER = ("fulmen_set", "trl_set")


def check_base(args: argparse.Namespace) -> None:
    """Refuse ``--versus BASE`` before any run where BASE is no race with these settings."""
    settings = {key: getattr(args, key) for key in SETTINGS}
    differ = settings_differ(recorded_settings(args.versus), settings, ignore=MAY_DIFFER)
    if differ:
        raise SystemExit(f"--versus {args.versus}: a race with other settings ({differ})")


def versus(out: Path, base: Path) -> dict[str, Any]:
    """Per dataset and rate, ``out``'s fulmen runs minus ``base``'s, seed by seed.

    Each entry has the accuracy difference at every mark (mean ± SE over the paired seeds),
    the final gain with its two standard errors (``paired_gain``), and each side's steps,
    share of flat groups (all rewards equal: nothing to learn) and sampling cost (rollouts
    over ``tasks_per_step * group_size`` a step; 1.0 is a step without dynamic sampling).
    """
    settings, base_settings = recorded_settings(out), recorded_settings(base)
    differ = settings_differ(base_settings, settings, ignore=MAY_DIFFER)
    if differ:
        raise SystemExit(f"--versus {base}: a race with other settings ({differ})")
    marks = [float(m) for m in settings["marks"].split(",")]
    group, tasks = settings["group_size"], settings["tasks_per_step"]
    here, there = read_results(out / "results.jsonl"), read_results(base / "results.jsonl")
    found: dict[str, Any] = {}
    for dataset, lr in sorted({_key(r) for r in here if _fulmen_point(r)}):
        mine = [r for r in here if _fulmen_point(r) and _key(r) == (dataset, lr)]
        theirs = [r for r in there if _fulmen_point(r) and _key(r) == (dataset, lr)]
        seeds = sorted({r["seed"] for r in mine} & {r["seed"] for r in theirs})
        name = f"{dataset}, lr {lr:g}"
        if not seeds:
            found[name] = {"seeds": 0, "note": f"{base} has no fulmen run of these seeds"}
            continue
        mine_at, theirs_at = _by_seed_minute(mine), _by_seed_minute(theirs)
        difference = {
            str(m): mean_se(
                [mine_at[s, m]["accuracy"] - theirs_at[s, m]["accuracy"] for s in seeds]
            )
            for m in marks
        }
        last = max(marks)
        runs = {
            side: [root / dataset / "fulmen" / f"lr{lr:g}" / f"seed{s}" for s in seeds]
            for side, root in (("setting", out), ("base", base))
        }
        found[name] = {
            "fulmen_set": settings["fulmen_set"],
            "base_fulmen_set": base_settings["fulmen_set"],
            "accuracy_difference": {m: {"mean": v[0], "se": v[1]} for m, v in difference.items()},
            **paired_gain(_finals(mine_at, seeds, last), _finals(theirs_at, seeds, last)),
            "sampling": {side: sampling(paths, group, tasks) for side, paths in runs.items()},
        }
    return found


def sampling(runs: list[Path], group_size: int, tasks_per_step: int) -> dict[str, float]:
    """Steps a run, the share of flat groups and the sampling cost over ``runs``' steps.

    A run with dynamic sampling reports its groups and rollouts (``sampling/…``); one without
    counts a flat group's samples as left out for want of advantage, a group at a time.
    """
    steps = groups = flat = rollouts = 0.0
    for run in runs:
        rows = [r for r in _metrics(run) if "time/step_s" in r]
        steps += len(rows)
        for r in rows:
            if "sampling/groups" in r:
                groups += r["sampling/groups"]
                flat += r["sampling/flat_groups"]
                rollouts += r["sampling/rollouts"]
            else:
                groups += r["groups"]
                flat += r["skipped_zero_advantage"] / group_size
                rollouts += r["rollouts"]
    return {
        "steps": steps / len(runs),
        "flat_groups": flat / groups if groups else float("nan"),
        "cost": rollouts / (steps * tasks_per_step * group_size) if steps else float("nan"),
    }


def _metrics(run: Path) -> list[dict[str, Any]]:
    from fulmen.trainer.metrics import read_metrics

    return list(read_metrics(run / "metrics.jsonl"))


def _by_seed_minute(rows: list[dict[str, Any]]) -> dict[tuple[int, float], dict[str, Any]]:
    return {(r["seed"], r["minute"]): r for r in rows}


def _finals(
    at: dict[tuple[int, float], dict[str, Any]], seeds: list[int], last: float
) -> tuple[dict[int, float], dict[int, list[int]]]:
    """Each seed's final accuracy and, where kept, its per-problem verdicts."""
    rows = {s: at[s, last] for s in seeds}
    kept = {s: r["correct"] for s, r in rows.items() if r.get("correct") is not None}
    return {s: r["accuracy"] for s, r in rows.items()}, kept


def _fulmen_point(row: dict[str, Any]) -> bool:
    return row["kind"] == "point" and row["trainer"] == "fulmen"


def _key(row: dict[str, Any]) -> tuple[str, float]:
    return row["dataset"], row["lr"]
