"""The text and JSON report of a re-scoring: counts, means, a histogram, the biggest changes.

A re-scoring by a judge (``RescoreResult.judge``) also reports the judge's requests, cache
hits and retries, what was posted, and each rollout's old and new reward with its criteria.

>>> histogram([0.0, 0.0, 1.0], [1.0, 1.0, 1.0], bins=2)
[(0.0, 0.5, 2, 0), (0.5, 1.0, 1, 3)]
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from fulmen.debugging.rescore import JudgeTally, RescoredRollout, RescoreResult

__all__ = ["format_rescore", "histogram", "rescore_summary"]

_BAR = 30


def histogram(
    old: Sequence[float], new: Sequence[float], *, bins: int = 10
) -> list[tuple[float, float, int, int]]:
    """Count old and new values in ``bins`` equal bins over their common range.

    Returns ``(low, high, old_count, new_count)`` per bin; the last bin includes its upper
    edge. All values equal give one bin.
    """
    values = [*old, *new]
    if not values:
        return []
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return [(low, high, len(old), len(new))]
    width = (high - low) / bins

    def index(value: float) -> int:
        # A hair over the quotient, so a value on an edge (0.3 / 0.1 = 2.999...) is binned up.
        return min(bins - 1, int((value - low) / width + 1e-9))

    old_counts, new_counts = [0] * bins, [0] * bins
    for value in old:
        old_counts[index(value)] += 1
    for value in new:
        new_counts[index(value)] += 1
    return [
        (low + i * width, low + (i + 1) * width, old_counts[i], new_counts[i]) for i in range(bins)
    ]


def rescore_summary(result: RescoreResult, *, top: int = 10) -> dict[str, Any]:
    """Return the figures of a re-scoring as JSON-ready data.

    ``most_changed`` holds ``top`` rollouts and ``errors`` as many failed ones. After a judge,
    ``errors`` holds every failed rollout, ``items`` every rollout (old and new reward, its
    criteria's ``scores``) and ``judge`` what the judge did (``None`` otherwise).
    """
    judged = result.judge is not None
    scored = result.scored
    old = [i.old for i in scored if i.old is not None]
    new = [i.new for i in scored if i.new is not None]
    return {
        "rollouts": len(result.items),
        "scored": len(scored),
        "failed": len(result.failed),
        "changed": len(result.changed),
        "old": _stats(old),
        "new": _stats(new),
        "histogram": [
            {"low": lo, "high": hi, "old": a, "new": b} for lo, hi, a, b in histogram(old, new)
        ],
        "air": _air(result),
        "most_changed": [_item(i) for i in result.most_changed(top)],
        "errors": [_item(i) for i in (result.failed if judged else result.failed[:top])],
        **({"items": [_item(i) for i in result.items]} if judged else {}),
        "judge": _judge(result.judge),
    }


def _judge(tally: JudgeTally | None) -> dict[str, Any] | None:
    if tally is None:
        return None
    return {
        "requests": tally.requests,
        "cache_hits": tally.cache_hits,
        "retries": tally.retries,
        "http_retries": tally.http_retries,
        "posted": tally.posted,
        "is_dry_run": tally.posted is None,
        "primary": tally.primary,
    }


def _air(result: RescoreResult) -> dict[str, dict[str, int]]:
    """Per automatic signal: the calls it fired on and the rollouts holding one."""
    out: dict[str, dict[str, int]] = {}
    for item in result.items:
        for name, calls in item.air.items():
            entry = out.setdefault(name, {"calls": 0, "rollouts": 0})
            entry["calls"] += calls
            entry["rollouts"] += 1
    return dict(sorted(out.items()))


def _stats(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "mean": None, "min": None, "max": None}
    return {
        "count": len(values),
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
    }


def _item(item: RescoredRollout) -> dict[str, Any]:
    return {
        "rollout_id": item.rollout.rollout_id,
        "task_id": item.rollout.task_id,
        "old": item.old,
        "new": item.new,
        "change": item.change,
        "final_text": item.rollout.final_text[:200],
        "error": item.error,
        "scores": dict(item.scores),
    }


def format_rescore(result: RescoreResult, *, top: int = 10) -> str:
    """Return the report as text: counts, old vs new means, a histogram, the top changes."""
    summary = rescore_summary(result, top=top)
    old, new, judge = summary["old"], summary["new"], summary["judge"]
    verb, scorer = ("judged", "the judge could not score") if judge else ("rescored", "")
    lines = [
        f"{verb} {summary['scored']} of {summary['rollouts']} rollouts "
        f"({summary['failed']} {scorer or 'failed in the reward function'}); "
        f"{summary['changed']} changed",
        f"  old reward: {_line(old)}",
        f"  new reward: {_line(new)}",
    ]
    if judge:
        lines += _judge_lines(judge)
    if summary["air"]:
        fired = ", ".join(
            f"{name} {v['calls']} calls in {v['rollouts']} rollouts"
            for name, v in summary["air"].items()
        )
        lines.append(f"  automatic signals (fulmen.transitions.air): {fired}")
    rows = summary["histogram"]
    if rows:
        most = max(max(r["old"], r["new"]) for r in rows) or 1
        lines.append(f"\n  {'reward bin':<17} {'old':<{_BAR + 6}} new")
        for number, row in enumerate(rows, start=1):
            close = "]" if number == len(rows) else ")"
            label = f"[{row['low']:.3f}, {row['high']:.3f}{close}"
            old_bar, new_bar = _bar(row["old"], most), _bar(row["new"], most)
            lines.append(f"  {label:<17} {old_bar:<{_BAR + 6}} {new_bar}".rstrip())
    if judge:
        lines += _per_rollout(summary["items"], top)
    elif summary["most_changed"]:
        lines.append("\n  most changed:")
        lines += [_row(item) for item in summary["most_changed"]]
    for item in summary["errors"]:
        lines.append(f"  error on {item['rollout_id']}: {item['error']}")
    return "\n".join(lines)


def _judge_lines(judge: dict[str, Any]) -> list[str]:
    posted = (
        "dry run: nothing posted"
        if judge["is_dry_run"]
        else f"posted {judge['posted']} rewards (primary {judge['primary']!r})"
    )
    return [
        f"  judge: {judge['requests']} requests, {judge['cache_hits']} cache hits, "
        f"{judge['http_retries']} retried tries (429, 5xx, unreachable), "
        f"{judge['retries']} answers out of format asked again",
        f"  {posted}",
    ]


def _per_rollout(items: list[dict[str, Any]], top: int) -> list[str]:
    scored = [i for i in items if i["error"] is None]
    if not scored:
        return []
    lines = ["\n  per rollout (old -> new reward; criteria):"]
    for item in scored[:top]:
        criteria = " ".join(f"{k}={v:.2f}" for k, v in item["scores"].items())
        lines.append(f"{_row(item)}  [{criteria}]")
    if len(scored) > top:
        lines.append(f"  ... {len(scored) - top} more (--top N, or --json lists every rollout)")
    return lines


def _row(item: dict[str, Any]) -> str:
    old_text = "none" if item["old"] is None else f"{item['old']:.4f}"
    return (
        f"  {item['rollout_id']:<28} task={item['task_id']} {old_text} -> "
        f"{item['new']:.4f} ({item['change']:+.4f})  {_excerpt(item['final_text'])}"
    )


def _line(stats: dict[str, Any]) -> str:
    if not stats["count"]:
        return "none"
    return (
        f"n={stats['count']} mean={stats['mean']:.4f} min={stats['min']:.4f} max={stats['max']:.4f}"
    )


def _bar(count: int, most: int) -> str:
    return f"{count:>5} " + "#" * round(_BAR * count / most)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= 50 else flat[:49] + "…")
