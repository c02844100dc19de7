"""One fulmen setting against fulmen's runs of another race: the paired gain and what it cost.

The sparse-reward remedies (``algorithm.dynamic_sampling``) are measured this way: the race run
again with ``--fulmen-set`` into an ``OUT`` of its own and ``--versus BASE`` naming the race run
without it, with every other setting the same. Each seed's run is paired with the base's run of
that seed (the same tasks drawn in the same order at the first draw, the same held-out set)
when both ran on one machine: a seed whose runs ran on different machines is left out and named.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from race.fulmen_side import run_sampling, step_rows
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
    Seeds whose two runs' rows name different machines are left out, under ``other_machine``.
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
        # A run's budget is wall-clock: on a machine 1.5-2x slower it reaches fewer steps, so
        # a seed's two runs are paired only where they ran on one machine.
        machines = {
            s: (
                _speed(here, dataset, lr, s).get("machine"),
                _speed(there, dataset, lr, s).get("machine"),
            )
            for s in seeds
        }
        apart = {
            str(s): {"setting": m[0], "base": m[1]} for s, m in machines.items() if m[0] != m[1]
        }
        seeds = [s for s in seeds if machines[s][0] == machines[s][1]]
        if not seeds:
            note = f"{base} has no fulmen run of these seeds on the same machine"
            found[name] = {"seeds": 0, "note": note, "other_machine": apart}
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
            side: [
                (_speed(rows, dataset, lr, s), root / dataset / "fulmen" / f"lr{lr:g}" / f"seed{s}")
                for s in seeds
            ]
            for side, rows, root in (("setting", here, out), ("base", there, base))
        }
        found[name] = {
            "fulmen_set": settings["fulmen_set"],
            "base_fulmen_set": base_settings["fulmen_set"],
            "accuracy_difference": {m: {"mean": v[0], "se": v[1]} for m, v in difference.items()},
            **paired_gain(_finals(mine_at, seeds, last), _finals(theirs_at, seeds, last)),
            "sampling": {side: sampling(paths, group, tasks) for side, paths in runs.items()},
            "machines": sorted({m[0] or "?" for s, m in machines.items() if s in seeds}),
            "other_machine": apart,
        }
    return found


def sampling(
    runs: list[tuple[dict[str, Any], Path]], group_size: int, tasks_per_step: int
) -> dict[str, Any]:
    """Steps a run, the share of flat groups and the sampling cost over ``runs``' steps.

    Each run is its ``speed`` row and its folder. The row carries the run's group counts
    (``run_sampling``); a row recorded before it did is counted from the folder's metrics,
    and where neither is there the entry says so instead of guessing.
    """
    steps = groups = flat = rollouts = 0.0
    for speed, folder in runs:
        counts = speed if "groups" in speed else None
        if counts is None and (folder / "metrics.jsonl").is_file():
            counts = run_sampling(step_rows(folder), group_size)
        if counts is None:
            return {"note": f"{folder}: its group counts were not recorded, its folder is gone"}
        steps += speed["steps"]
        groups += counts["groups"]
        flat += counts["flat_groups"]
        rollouts += counts["rollouts"]
    return {
        "steps": steps / len(runs),
        "flat_groups": flat / groups if groups else float("nan"),
        "cost": rollouts / (steps * tasks_per_step * group_size) if steps else float("nan"),
    }


def _speed(rows: list[dict[str, Any]], dataset: str, lr: float, seed: int) -> dict[str, Any]:
    """The fulmen run's ``speed`` row (its steps, throughput and group counts)."""
    run = {"kind": "speed", "trainer": "fulmen", "dataset": dataset, "lr": lr, "seed": seed}
    return next(r for r in rows if r == {**r, **run})


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
