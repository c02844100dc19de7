"""Where a run's time went and what held it back, from its own metrics, with what to change.

``diagnose`` reads a run's metrics records (``metrics.jsonl``, or the run's record in a store)
and, when the run's built-in engine is still up, its counters; it returns short findings, each
with the figure it rests on and the setting that addresses it:

- the share of step time in rollouts, the update and the weight sync, and for asynchronous
  runs the time the trainer waited for rollouts or the rollouts for weights;
- the share of the run spent validating;
- how many steps made no update, and the most common reason (``no_update_reason``);
- the prefix cache's hit rate on prompt tokens.

A finding appears only when its figure says something is worth changing; the thresholds are
stated in each text, so a reader can disagree with them.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fulmen.algorithms.grpo.diagnose import no_update_reason

__all__ = ["Finding", "diagnose", "engine_counters"]

#: A share of step time above which a phase is called the bottleneck.
_DOMINANT = 0.6
#: A share of the run's time spent validating above which it is worth saying.
_VALIDATION = 0.25
#: Steps without an update above this share are worth saying.
_NO_UPDATE = 0.3
#: A prefix-cache hit rate below this, with the cache on, is worth saying.
_PREFIX_HITS = 0.2


@dataclass(frozen=True)
class Finding:
    """One observation about a run, the figure it rests on, and what to change.

    Attributes:
        what: the observation, with its figure.
        remedy: the setting (and doc) that addresses it; empty when there is nothing to do.
    """

    what: str
    remedy: str = ""

    def line(self) -> str:
        """One line for a console: the observation, then the remedy."""
        return f"{self.what}: {self.remedy}" if self.remedy else self.what


def diagnose(
    records: Sequence[Mapping[str, float]],
    *,
    is_async: bool = False,
    engine: Mapping[str, float] | None = None,
) -> list[Finding]:
    """Return the findings about a run's metrics ``records`` (see the module docstring).

    ``engine`` holds the built-in engine's counters (``engine_counters``) when it was read.
    """
    steps = [r for r in records if r.get("time/step_s") is not None]
    findings: list[Finding] = []
    if steps:
        findings += _time_split(steps, is_async)
        findings += _no_updates(steps)
    findings += _validation(records, steps)
    if engine is not None:
        findings += _prefix_cache(engine)
    return findings


def engine_counters(page: str) -> dict[str, float]:
    """Parse the samples without labels of an engine's ``/metrics`` page (Prometheus text)."""
    out: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.partition(" ")
        if "{" in name:
            continue
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def _total(steps: Sequence[Mapping[str, float]], key: str) -> float:
    return sum(float(r.get(key, 0.0)) for r in steps)


def _time_split(steps: Sequence[Mapping[str, float]], is_async: bool) -> list[Finding]:
    total = _total(steps, "time/step_s")
    if total <= 0:
        return []
    shares = {
        "rollouts": _total(steps, "time/rollout_s") / total,
        "the update": _total(steps, "time/train_s") / total,
        "the weight sync": _total(steps, "time/sync_s") / total,
    }
    split = ", ".join(f"{name} {share:.0%}" for name, share in shares.items())
    out = [Finding(f"step time ({len(steps)} steps, {total / 60:.1f} min): {split}")]
    if is_async:
        waited = _total(steps, "time/wait_data_s") / total
        if waited > 1 - _DOMINANT:
            out.append(
                Finding(
                    f"the trainer waited for rollouts {waited:.0%} of step time",
                    "more runners or rollouts.concurrency, a larger engine.max_batch, or "
                    "algorithm.async.prefetch_steps (docs/async.md)",
                )
            )
        return out
    if shares["rollouts"] > _DOMINANT:
        out.append(
            Finding(
                f"rollouts take {shares['rollouts']:.0%} of step time (above {_DOMINANT:.0%})",
                "algorithm.async overlaps them with the update (docs/async.md); more "
                "rollouts.concurrency or engine.max_batch, engine.prefix_cache (docs/engine.md)",
            )
        )
    elif shares["the update"] > _DOMINANT:
        out.append(
            Finding(
                f"the update takes {shares['the update']:.0%} of step time (above {_DOMINANT:.0%})",
                "grpo.autocast bfloat16 or a GPU (docs/trainer-precision.md), "
                "algorithm.data_parallel (docs/data-parallel.md)",
            )
        )
    if shares["the weight sync"] > 1 - _DOMINANT:
        out.append(
            Finding(
                f"the weight sync takes {shares['the weight sync']:.0%} of step time",
                "LoRA instead of full weights (grpo.finetune: lora); algorithm.checkpoint_every",
            )
        )
    return out


def _no_updates(steps: Sequence[Mapping[str, float]]) -> list[Finding]:
    idle = [r for r in steps if r.get("updated") == 0.0]
    if not idle or len(idle) / len(steps) <= _NO_UPDATE:
        return []
    reasons = Counter(no_update_reason(r).split(";")[0].split(" (")[0] for r in idle)
    reason, count = reasons.most_common(1)[0]
    remedy = (
        "more varied rewards (partial credit), a larger algorithm.group_size or a higher "
        "rollouts.train_sampling.temperature"
        if "scored the same" in reason
        else "see the step's warning for its cause"
    )
    return [
        Finding(
            f"{len(idle)} of {len(steps)} steps made no update; most often ({count}): {reason}",
            remedy,
        )
    ]


def _validation(
    records: Sequence[Mapping[str, float]], steps: Sequence[Mapping[str, float]]
) -> list[Finding]:
    validation = _total(records, "time/val_s")
    training = _total(steps, "time/step_s")
    if validation <= 0 or validation / (validation + training) <= _VALIDATION:
        return []
    runs = sum(1 for r in records if r.get("time/val_s") is not None)
    share = validation / (validation + training)
    return [
        Finding(
            f"validation took {share:.0%} of the run ({runs} validations, "
            f"{statistics.fmean(r['time/val_s'] for r in records if 'time/val_s' in r):.1f} s "
            "each)",
            "a larger validation.every or a smaller validation.max_tasks",
        )
    ]


def _prefix_cache(engine: Mapping[str, float]) -> list[Finding]:
    if not engine.get("fulmen_engine_prefix_cache_enabled"):
        return []
    hits = engine.get("fulmen_engine_prefix_cache_hit_tokens_total", 0.0)
    misses = engine.get("fulmen_engine_prefix_cache_miss_tokens_total", 0.0)
    if hits + misses <= 0:
        return []
    rate = hits / (hits + misses)
    text = (
        f"the prefix cache served {rate:.0%} of prompt tokens ({hits:.0f} of {hits + misses:.0f})"
    )
    if rate >= _PREFIX_HITS:
        return [Finding(text)]
    return [
        Finding(
            text,
            "prompts that share a long start (system prompt, tools, examples first) reuse it "
            "across calls and group members (docs/engine.md)",
        )
    ]
