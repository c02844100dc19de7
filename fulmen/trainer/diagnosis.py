"""Where a run's time went and what held it back, from its own metrics, with what to change.

``diagnose`` reads a run's metrics records (``metrics.jsonl``, or the run's record in a store)
and, when the run's built-in engine is still up, its counters; it returns short findings, each
with the figure it rests on and the setting that addresses it:

- the share of step time in rollouts, the update and the weight sync, and for asynchronous
  runs the time the trainer waited for rollouts or the rollouts for weights;
- the share of the run spent validating;
- when rollouts dominate a synchronous run, whether they ran in waves: fewer at once
  (``rollouts/concurrency_max``) than a step had;
- how many steps made no update, and the most common reason (the algorithm's own,
  ``fulmen.algorithms.registry.no_update_reason``);
- from the engine's counters: the prefix cache's hit rate on prompt tokens, a mean decode batch
  well below ``engine.max_batch`` while rollouts dominate and fewer of them ran at once than it
  batches, and a long mean wait for admission.

Records and counters from before a figure existed give no finding about it.

A finding appears only when its figure says something is worth changing; the thresholds are
stated in each text, so a reader can disagree with them.

``diagnose_stored_run`` reads a run and all its metrics from a store and diagnoses them (what
``fulmen runs diagnose`` prints, live while the run trains); ``diagnosis_json`` is its result
as JSON data (the dashboard's run page).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.algorithms.registry import no_update_reason, recorded_algorithm
from fulmen.store.reading import read_run_metrics

if TYPE_CHECKING:
    from fulmen.store.roles import RunLog
    from fulmen.types import Run

__all__ = [
    "Finding",
    "RunDiagnosis",
    "diagnose",
    "diagnose_stored_run",
    "diagnosis_json",
    "engine_counters",
    "is_async_config",
]

#: A share of step time above which a phase is called the bottleneck.
_DOMINANT = 0.6
#: A share of the run's time spent validating above which it is worth saying.
_VALIDATION = 0.25
#: Steps without an update above this share are worth saying.
_NO_UPDATE = 0.3
#: A prefix-cache hit rate below this, with the cache on, is worth saying.
_PREFIX_HITS = 0.2
#: A mean decode batch below this share of ``engine.max_batch``, with rollouts dominant, too.
_BATCH_FILL = 0.5
#: A mean wait for a place in the engine's batch above this many seconds is worth saying.
_ADMISSION_WAIT_S = 1.0


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
    algorithm: str | None = None,
) -> list[Finding]:
    """Return the findings about a run's metrics ``records`` (see the module docstring).

    ``engine`` holds the built-in engine's counters (``engine_counters``) when it was read;
    ``algorithm`` is the run's (its first stage's), whose reasons explain steps without an
    update (``None``: the default algorithm's).
    """
    steps = [r for r in records if r.get("time/step_s") is not None]
    findings: list[Finding] = []
    dominant = bool(steps) and _rollouts_dominate(steps, is_async)
    if steps:
        findings += _time_split(steps, is_async)
        if dominant and not is_async:
            findings += _waves(steps)
        findings += _no_updates(steps, algorithm)
    findings += _validation(records, steps)
    if engine is not None:
        findings += _prefix_cache(engine)
        if dominant:
            findings += _decode_batch(engine, steps)
        findings += _admission_wait(engine)
    return findings


@dataclass(frozen=True)
class RunDiagnosis:
    """A stored run's diagnosis and what it rests on.

    Attributes:
        run: the run as the store holds it.
        records: metrics records read.
        steps: of which training steps (records with ``time/step_s``).
        is_async: whether the run's config trains asynchronously.
        findings: ``diagnose``'s findings (empty while no step is recorded).
    """

    run: Run
    records: int
    steps: int
    is_async: bool
    findings: list[Finding]


def is_async_config(config: Mapping[str, Any]) -> bool:
    """Whether a run's recorded config trains asynchronously (any stage has ``async``)."""
    stages = config.get("stages") or [config.get("algorithm")]
    return any(isinstance(s, Mapping) and s.get("async") is not None for s in stages)


async def diagnose_stored_run(
    store: RunLog, run_id: str, *, engine: Mapping[str, float] | None = None
) -> RunDiagnosis:
    """Read run ``run_id`` and every metrics record it has written to ``store``, and diagnose it.

    The run may still be training: the diagnosis covers the records written so far. ``engine``
    holds its engine's counters when the caller could read them. A run the store does not hold
    raises ``NotFound``.
    """
    run = await store.get_run(run_id)
    records = [m.values for m in await read_run_metrics(store, run_id)]
    is_async = is_async_config(run.config)
    return RunDiagnosis(
        run=run,
        records=len(records),
        steps=sum(1 for r in records if r.get("time/step_s") is not None),
        is_async=is_async,
        findings=diagnose(
            records, is_async=is_async, engine=engine, algorithm=recorded_algorithm(run.config)
        ),
    )


def diagnosis_json(diagnosis: RunDiagnosis) -> dict[str, Any]:
    """Return ``diagnosis`` as JSON data; each finding as ``fulmen runs diagnose --json`` has it.

    Findings carry ``what`` and ``remedy`` (as the CLI's JSON) and ``line`` (as its text).
    """
    return {
        "run_id": diagnosis.run.run_id,
        "status": diagnosis.run.status.value,
        "records": diagnosis.records,
        "steps": diagnosis.steps,
        "is_async": diagnosis.is_async,
        "findings": [
            {"what": f.what, "remedy": f.remedy, "line": f.line()} for f in diagnosis.findings
        ],
    }


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


def _rollouts_dominate(steps: Sequence[Mapping[str, float]], is_async: bool) -> bool:
    """Whether rollouts held steps back: their share of step time, or the trainer's wait."""
    total = _total(steps, "time/step_s")
    if total <= 0:
        return False
    if is_async:
        return _total(steps, "time/wait_data_s") / total > 1 - _DOMINANT
    return _total(steps, "time/rollout_s") / total > _DOMINANT


def _waves(steps: Sequence[Mapping[str, float]]) -> list[Finding]:
    measured = [r for r in steps if r.get("rollouts/concurrency_max") is not None]
    if not measured:
        return []
    at_once = max(r["rollouts/concurrency_max"] for r in measured)
    per_step = max(r.get("rollouts/finished", 0.0) for r in measured)
    if at_once >= per_step:
        return []
    mean = statistics.fmean(r.get("rollouts/concurrency_mean", 0.0) for r in measured)
    return [
        Finding(
            f"at most {at_once:.0f} rollouts ran at once for {per_step:.0f} a step (on average "
            f"{mean:.1f} at once), so they ran in waves",
            "raise rollouts.concurrency (rollouts at once per runner) or add runners "
            "(cluster.runners)",
        )
    ]


def _no_updates(steps: Sequence[Mapping[str, float]], algorithm: str | None) -> list[Finding]:
    idle = [r for r in steps if r.get("updated") == 0.0]
    if not idle or len(idle) / len(steps) <= _NO_UPDATE:
        return []
    reasons = Counter(no_update_reason(algorithm, r).split(";")[0].split(" (")[0] for r in idle)
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


def _decode_batch(
    engine: Mapping[str, float], steps: Sequence[Mapping[str, float]]
) -> list[Finding]:
    passes = engine.get("fulmen_engine_decode_passes_total", 0.0)
    rows = engine.get("fulmen_engine_decode_rows_total")
    largest = engine.get("fulmen_engine_max_batch", 0.0)
    if rows is None or passes <= 0 or largest <= 0:
        return []
    at_once = max((r.get("rollouts/concurrency_max", 0.0) for r in steps), default=0.0)
    if at_once >= largest:
        # As many rollouts ran at once as the engine batches: their calls came in one by one
        # (the agents' own time, a CPU shared with the engine), and more of them at once, the
        # advice below, would change nothing. The time split already says rollouts dominate.
        return []
    mean = rows / passes
    if mean >= _BATCH_FILL * largest:
        return []
    return [
        Finding(
            f"the engine decoded {mean:.1f} sequences a pass on average, below "
            f"{_BATCH_FILL:.0%} of engine.max_batch {largest:.0f}, while rollouts held steps back",
            "more rollouts at once: rollouts.concurrency or cluster.runners, and "
            "algorithm.tasks_per_step when a step has fewer rollouts than engine.max_batch",
        )
    ]


def _admission_wait(engine: Mapping[str, float]) -> list[Finding]:
    admitted = engine.get("fulmen_engine_admitted_requests_total", 0.0)
    waited = engine.get("fulmen_engine_queue_wait_seconds_total")
    if waited is None or admitted <= 0:
        return []
    mean = waited / admitted
    if mean <= _ADMISSION_WAIT_S:
        return []
    return [
        Finding(
            f"model calls waited {mean:.1f} s on average for a place in the engine's batch "
            f"(above {_ADMISSION_WAIT_S:g} s; {admitted:.0f} requests)",
            "a larger engine.max_batch (memory allowing), or another engine "
            "(cluster.engine_replicas) (docs/engine.md)",
        )
    ]
