"""The race's summary: each trainer at its better rate, its curve over seeds, the comparisons."""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Any


def mean_se(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (0 for one value)."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """The first minute ``curve`` (minute, accuracy) reaches ``target``, linearly between marks."""
    if not curve:
        return None
    if curve[0][1] >= target:
        return curve[0][0]
    for (m0, a0), (m1, a1) in itertools.pairwise(curve):
        if a1 >= target:  # a0 < target <= a1
            return m0 + (m1 - m0) * (target - a0) / (a1 - a0)
    return None


def summarize(records: list[dict[str, Any]], marks: list[float]) -> dict[str, Any]:
    """Per dataset: each trainer at its best rate, its curve over seeds, and the comparisons."""
    out: dict[str, Any] = {}
    points = [r for r in records if r["kind"] == "point"]
    for dataset in sorted({r["dataset"] for r in points}):
        best: dict[str, Any] = {}
        finals: dict[str, dict[int, list[int]]] = {}
        for trainer in sorted({r["trainer"] for r in points if r["dataset"] == dataset}):
            mine = [r for r in points if (r["dataset"], r["trainer"]) == (dataset, trainer)]
            final = max(marks)
            by_lr = rate_grid(mine, final)
            lr = max(by_lr, key=lambda x: by_lr[x])
            chosen = [r for r in mine if r["lr"] == lr]
            seeds = sorted({r["seed"] for r in chosen})
            curve = {m: mean_se([r["accuracy"] for r in chosen if r["minute"] == m]) for m in marks}
            per_seed = {
                s: [
                    (m, next(r["accuracy"] for r in chosen if r["seed"] == s and r["minute"] == m))
                    for m in marks
                ]
                for s in seeds
            }
            speed = [
                r
                for r in records
                if r["kind"] == "speed"
                and (r["dataset"], r["trainer"], r["lr"]) == (dataset, trainer, lr)
            ]
            finals[trainer] = {
                r["seed"]: r["correct"]
                for r in chosen
                if r["minute"] == final and r.get("correct") is not None
            }
            best[trainer] = {
                "lr": lr,
                "lr_grid": by_lr,
                "accuracy": {str(m): {"mean": v[0], "se": v[1]} for m, v in curve.items()},
                # Where this is not above 0, reaching TRL's final takes no time: no ratio.
                "final_over_start": curve[final][0] - curve[min(marks)][0],
                "per_seed": per_seed,
                "rollout_tokens_per_s": statistics.fmean(r["rollout_tokens_per_s"] for r in speed),
                "update_s_per_step": statistics.fmean(r["update_s_per_step"] for r in speed),
                "steps": statistics.fmean(r["steps"] for r in speed),
                "machines": sorted({r.get("machine", "?") for r in speed}),
            }
        out[dataset] = {"trainers": best, **_compare(best, marks, finals)}
    return out


def rate_grid(mine: list[dict[str, Any]], final: float) -> dict[float, float]:
    """Each rate's mean final accuracy over the seeds every rate ran (the grid's seeds).

    The grid may run on fewer seeds than the chosen rate (say seed 0 at both rates, seeds 1
    and 2 at the better one only): comparing rates over different seeds would compare seeds.
    """
    finals = {(r["lr"], r["seed"]): r["accuracy"] for r in mine if r["minute"] == final}
    rates = sorted({lr for lr, _ in finals})
    common = set.intersection(*({s for l2, s in finals if l2 == lr} for lr in rates))
    if not common:
        raise SystemExit(f"the rates {rates} share no seed: run each on one seed at least")
    return {lr: statistics.fmean(finals[lr, s] for s in sorted(common)) for lr in rates}


def _compare(
    best: dict[str, Any], marks: list[float], finals: dict[str, dict[int, list[int]]]
) -> dict[str, Any]:
    """TRL's final accuracy, the minutes each trainer needs to reach it, and the final gain.

    The gain is fulmen's final accuracy minus TRL's, paired by seed (``paired_gain``).
    """
    if not {"fulmen", "trl"} <= set(best):
        return {}
    final = str(max(marks))
    target = best["trl"]["accuracy"][final]["mean"]
    # On the mean curves: a seed whose TRL run ends below TRL's mean final never reaches it,
    # so times per seed would leave TRL's own time undefined.
    mean_time = {
        t: time_to([(m, best[t]["accuracy"][str(m)]["mean"]) for m in marks], target)
        for t in ("fulmen", "trl")
    }
    ratio = None
    if mean_time["fulmen"] is not None and mean_time["trl"]:
        ratio = mean_time["fulmen"] / mean_time["trl"]
    final_of = {t: {s: curve[-1][1] for s, curve in best[t]["per_seed"].items()} for t in best}
    return {
        "trl_final_accuracy": target,
        "minutes_to_trl_final": mean_time,
        "time_ratio_fulmen_over_trl": ratio,
        **paired_gain(
            (final_of["fulmen"], finals.get("fulmen", {})), (final_of["trl"], finals.get("trl", {}))
        ),
    }


def paired_gain(
    one: tuple[dict[int, float], dict[int, list[int]]],
    other: tuple[dict[int, float], dict[int, list[int]]],
) -> dict[str, Any]:
    """``one``'s final accuracy minus ``other``'s, paired by seed, with its two standard errors.

    Each side is (final accuracy by seed, per-problem verdicts by seed, where kept). The
    standard error over seeds says what another seed would change; the one over problems (the
    per-problem difference averaged over the seeds, on the one held-out set both are scored
    on) what another draw of problems would change. A gain counts as shown only with at least
    two seeds and at least twice the larger of the two.
    """
    (accuracy, correct), (accuracy_b, correct_b) = one, other
    seeds = sorted(set(accuracy) & set(accuracy_b))
    gains = [accuracy[s] - accuracy_b[s] for s in seeds]
    gain, se = mean_se(gains) if gains else (float("nan"), float("nan"))
    paired = [s for s in seeds if s in correct and s in correct_b]
    se_problems = None
    if paired:
        per_problem = [
            statistics.fmean(correct[s][i] - correct_b[s][i] for s in paired)
            for i in range(len(correct[paired[0]]))
        ]
        se_problems = mean_se(per_problem)[1]
    shown = (
        len(gains) >= 2
        and se_problems is not None
        and max(se, se_problems) > 0
        and gain >= 2 * max(se, se_problems)
    )
    return {
        "final_gain": gain,
        "final_gain_se": se,
        "final_gain_se_problems": se_problems,
        "seeds": len(gains),
        "gain_shown": shown,
    }
