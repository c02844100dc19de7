"""The story of a run as ``fulmen runs show`` tells it: the outcome first, then its metrics.

The headline: the final validation and the served one, each with its standard error over the
validation tasks (read from the run's validation rollouts in the store: ``val{step}`` in their
ids), which model version the run ends serving and why (the ``end/*`` metrics the trainer logs,
``fulmen.trainer.best``), and how many training steps made an update (``updated``). Then the
metrics, grouped by what they measure (``val/``, ``reward/``, the update, ``time/``, ...)
rather than in recording order. ``--json`` carries the headline as ``story``.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fulmen.store import Store
    from fulmen.types import ModelVersion, Run, RunMetrics

__all__ = [
    "Story",
    "Validation",
    "group_of",
    "grouped_rows",
    "read_story",
    "run_agent",
    "run_model",
    "run_reward",
    "story_lines",
    "validation_rewards",
    "version_marks",
]

#: Metrics without a ``/`` that the GRPO/PPO update logs: grouped with ``update/``.
_UPDATE = frozenset({
    "loss", "policy_loss", "value_loss", "kl", "entropy", "clip_fraction", "clip_fraction_low",
    "clip_fraction_high", "ratio_mean", "logprob_gap", "micro_batches", "updated",
    "skipped_nonfinite", "grad_norm", "learning_rate", "trained_tokens", "trained_reward_mean",
    "trained_reward_std", "step_time_s", "tokens_per_s", "trained_tokens_per_s",
})  # fmt: skip
#: Metrics without a ``/`` that describe the step's batch of rollouts and transitions.
_BATCH = frozenset({
    "rollouts", "groups", "transitions", "truncated", "stale", "dropped_truncated",
    "dropped_overlong", "dropped_untrained", "skipped_zero_advantage", "zeroed_advantage_tokens",
    "anchor_calls", "anchor_groups",
})  # fmt: skip
#: Groups in the order ``runs show`` prints them, with their titles; others follow by name.
_GROUPS: dict[str, str] = {
    "val": "validation (val/)",
    "end": "end of the run (end/)",
    "reward": "training reward (reward/)",
    "update": "the update (loss, kl, entropy, grad_norm, ...)",
    "batch": "the training batch (rollouts, groups, transitions, ...)",
    "time": "step time (time/)",
    "rollouts": "rollouts (rollouts/)",
    "sampling": "dynamic sampling (sampling/): groups run, flat, redrawn, the cost",
    "transitions": "calls turned into transitions (transitions/)",
    # Runs recorded before the trace adapter's package was named transitions.
    "adapter": "calls turned into transitions (adapter/, older runs)",
    "memory": "memory (memory/)",
}
_OTHER = "other"

# ``{run_id}-g{generation}[-st{stage}]-val{step}-t{task}``: ``StageRollouts.run``.
_VALIDATION_ID = r"-g(?P<gen>\d+)(?P<stage>-st\d+)?-val(?P<step>\d+)-t\d+$"


def group_of(name: str) -> str:
    """Return the group of metric ``name``: its prefix before ``/``, or a known group."""
    if "/" in name:
        return name.split("/", 1)[0]
    if name in _UPDATE:
        return "update"
    if name in _BATCH:
        return "batch"
    return _OTHER


def _group_order(group: str) -> tuple[int, str]:
    known = list(_GROUPS)
    if group in known:
        return known.index(group), ""
    return len(known) + (group == _OTHER), group


def grouped_rows(
    summary: Sequence[Mapping[str, Any]], row: Any, headers: Sequence[str], right: set[int]
) -> str:
    """Render metric summaries as one aligned table, a title line above each group.

    ``row(summary) -> list[str]`` builds a row; within a group, metrics keep recording order.
    """
    from fulmen.cli.rollouts import render_table

    groups: dict[str, list[Mapping[str, Any]]] = {}
    for item in summary:
        groups.setdefault(group_of(str(item["name"])), []).append(item)
    ordered = sorted(groups, key=_group_order)
    rows = [row(item) for g in ordered for item in groups[g]]
    lines = render_table(headers, rows, right=right).splitlines()
    out, at = [lines[0]], 1
    for group in ordered:
        title = _GROUPS.get(group, "other" if group == _OTHER else f"{group}/")
        out += ["", f"{title}:"]
        out += lines[at : at + len(groups[group])]
        at += len(groups[group])
    return "\n".join(out)


@dataclass(frozen=True)
class Validation:
    """One validation: its mean reward, standard error over tasks (``None``: unknown)."""

    step: int
    mean: float
    se: float | None = None
    tasks: int | None = None
    failed: int | None = None

    def text(self) -> str:
        """``0.625 ± 0.081 SE over 16 tasks (step 10)``; the parts known."""
        out = f"{self.mean:.3f}"
        if self.se is not None:
            out += f" ± {self.se:.3f} SE"
        if self.tasks is not None:
            out += f" over {self.tasks} tasks"
            if self.failed:
                out += f" ({self.failed} failed)"
        return f"{out} (step {self.step})"


@dataclass(frozen=True)
class Story:
    """A run's headline: validations, the served version and why, the steps with an update."""

    final: Validation | None
    before: Validation | None
    served: Validation | None
    served_version: str | None
    served_why: str | None
    steps: int
    updated_steps: int | None
    idle_steps: tuple[int, ...]

    def json(self) -> dict[str, Any]:
        """Return the story as JSON data (``runs show --json``'s ``story``)."""
        return asdict(self)


def _validation(step: int, rewards: Sequence[float | None] | None, mean: float | None,
                failed_policy: str) -> Validation | None:  # fmt: skip
    """Return a validation from its per-task rewards when stored, else its logged mean."""
    if rewards:
        if failed_policy == "leave_out":
            values = [r for r in rewards if r is not None]
        else:  # score_zero: what the trainer ranks versions by (fulmen.trainer.best)
            values = [0.0 if r is None else r for r in rewards]
        if values:
            se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
            failed = sum(r is None for r in rewards)
            return Validation(step, statistics.fmean(values), se, len(rewards), failed)
    if mean is None or not math.isfinite(mean):
        return None
    return Validation(step, mean)


def _served(versions: Sequence[ModelVersion], step: int) -> str:
    """Name the model version saved at ``step`` plainly (the latest if several)."""
    found = [v for v in versions if v.step == step]
    if not found:
        if step == 0:
            return "the model before training (step 0)"
        return f"step {step}'s model (no model version recorded for it)"
    version = max(found, key=lambda v: v.version)
    return f"model version {version.version} (step {step}, {version.kind.value})"


def _why(end: Mapping[str, float], final: Validation | None) -> str:
    """Say why the served version is served, from the ``end/*`` metrics."""
    final_text = f"{final.mean:.3f}" if final is not None else "?"
    if "end/best_step" not in end:
        return "the final version: no earlier version validated better"
    best = f"step {int(end['end/best_step'])}'s version validated best"
    best += f" ({end.get('end/best_reward_mean', math.nan):.3f} vs the final {final_text})"
    if end.get("end/kept_earlier"):
        return f"{best}: kept (validation.keep_best)"
    if end.get("end/best_files_missing"):
        return f"the final version: {best}, but its files are gone"
    return f"the final version: {best}; validation.keep_best is off"


def story_lines(story: Story) -> list[str]:
    """Return the headline lines ``runs show`` prints under the run's own line."""
    lines: list[str] = []
    if story.final is None:
        lines.append("  validation: none recorded")
    else:
        text = f"  final validation {story.final.text()}"
        if story.before is not None and story.before.step != story.final.step:
            text += f"; before training {story.before.mean:.3f}"
        lines.append(text)
    if story.served_version is not None:
        served = f"  served: {story.served_version}"
        if story.served is not None:
            served += f", validation {story.served.text()}"
        lines.append(served)
        if story.served_why:
            lines.append(f"    why: {story.served_why}")
    if story.updated_steps is None:
        lines.append(f"  steps: {story.steps} (no update recorded)")
    else:
        text = f"  steps with an update: {story.updated_steps} of {story.steps}"
        if story.idle_steps:
            shown = ", ".join(str(s) for s in story.idle_steps[:10])
            more = f" and {len(story.idle_steps) - 10} more" if len(story.idle_steps) > 10 else ""
            text += f" (none at step {shown}{more}: `fulmen runs diagnose` says why)"
        lines.append(text)
    return lines


def _config_value(run: Run, *keys: str) -> Any:
    value: Any = run.config
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


async def validation_rewards(
    store: Store, run_id: str, steps: set[int]
) -> dict[int, list[float | None]]:
    """Return each validation's per-task rewards (``None``: failed) at ``steps`` of ``run_id``.

    Only validations of a run without stages are matched (a stage's ids count its own steps);
    when a restart repeated a validation, the latest one counts.
    """
    from fulmen.store.reading import iter_rollouts
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    pattern = re.compile(re.escape(run_id) + _VALIDATION_ID)
    latest: dict[int, tuple[int, list[Any]]] = {}
    async for rollout in iter_rollouts(store, RolloutQuery(mode=Mode.VAL, limit=500)):
        match = pattern.match(rollout.rollout_id)
        if match is None or match.group("stage") or int(match.group("step")) not in steps:
            continue
        step, gen = int(match.group("step")), int(match.group("gen"))
        known = latest.get(step)
        if known is None or gen > known[0]:
            latest[step] = (gen, [rollout])
        elif gen == known[0]:
            known[1].append(rollout)
    out: dict[int, list[float | None]] = {}
    for step, (_, rollouts) in latest.items():
        rewards: list[float | None] = []
        for rollout in rollouts:
            if rollout.status is not RolloutStatus.SUCCEEDED:
                rewards.append(None)
                continue
            rewards.append((await load_attempt(store, rollout.rollout_id)).final_reward)
        out[step] = rewards
    return out


async def read_story(
    store: Store, run: Run, records: Sequence[RunMetrics], versions: Sequence[ModelVersion]
) -> Story:
    """Build the headline of ``run`` from its metrics, model versions and validation rollouts."""
    means = {r.step: r.values["val/reward_mean"] for r in records if "val/reward_mean" in r.values}
    end: dict[str, float] = {}
    for record in records:
        end.update({k: v for k, v in record.values.items() if k.startswith("end/")})
    final_step = max(means) if means else None
    before_step = min(means) if means else None
    served_step = int(end["end/served_step"]) if "end/served_step" in end else None
    wanted = {s for s in (final_step, before_step, served_step) if s is not None}
    rewards = await validation_rewards(store, run.run_id, wanted) if wanted else {}
    policy = str(_config_value(run, "validation", "failed_rollouts") or "score_zero")

    def at(step: int | None) -> Validation | None:
        if step is None:
            return None
        return _validation(step, rewards.get(step), means.get(step), policy)

    final = at(final_step)
    if served_step is not None:
        served_version: str | None = _served(versions, served_step)
        why: str | None = _why(end, final)
    elif versions:
        last = max(versions, key=lambda v: v.version)
        served_version = _served(versions, last.step)
        why = "the last model the run served " + (
            "(no validation to choose another by)"
            if run.ended_at is not None
            else "(the run has not ended: the end of the run picks the served version)"
        )
    else:
        served_version = why = None
    updates = {r.step: r.values["updated"] for r in records if "updated" in r.values}
    timed = {r.step for r in records if "time/step_s" in r.values}
    return Story(
        final=final,
        before=at(before_step),
        served=at(served_step),
        served_version=served_version,
        served_why=why,
        steps=len(updates) if updates else len(timed),
        updated_steps=sum(v > 0 for v in updates.values()) if updates else None,
        idle_steps=tuple(sorted(s for s, v in updates.items() if v <= 0)),
    )


def run_model(run: Run) -> str:
    """Return the model the run's recorded config names (``-``: none recorded)."""
    model = _config_value(run, "model")
    return str(model) if model else "-"


def run_agent(run: Run) -> str:
    """Return the run's agent: ``module:function``, or a command agent's program."""
    agent = _config_value(run, "agent")
    if isinstance(agent, Mapping):
        command = agent.get("command")
        if isinstance(command, list) and command:
            return f"command {' '.join(str(c) for c in command)}"
        return "command"
    return str(agent) if agent else "-"


def run_reward(records: Sequence[RunMetrics]) -> tuple[float, str] | None:
    """Return the run's reward for a listing: its last validation, else its mean training reward.

    Returns the value and where it comes from (``val`` or ``train``); ``None``: neither.
    """
    val = [r.values["val/reward_mean"] for r in records if "val/reward_mean" in r.values]
    if val and math.isfinite(val[-1]):
        return val[-1], "val"
    train = [r.values["reward/mean"] for r in records if "reward/mean" in r.values]
    train = [v for v in train if math.isfinite(v)]
    if train:
        return statistics.fmean(train), "train"
    return None


def version_marks(
    versions: Sequence[ModelVersion], records: Sequence[RunMetrics]
) -> dict[int, str]:
    """Mark one run's served and best model versions: ``{version: "served best"}``.

    The served version is the one at ``end/served_step`` (the end of the run's choice), else
    the latest (what a running run serves now). The best is the one at ``end/best_step`` (an
    earlier version that validated better than the final one), else the served one when the
    end of the run was recorded, else the one with the highest ``val/reward_mean``.
    """
    if not versions:
        return {}
    end: dict[str, float] = {}
    for record in records:
        end.update({k: v for k, v in record.values.items() if k.startswith("end/")})

    def at(step: float) -> int | None:
        found = [v.version for v in versions if v.step == int(step)]
        return max(found) if found else None

    served = at(end["end/served_step"]) if "end/served_step" in end else None
    if "end/served_step" not in end:
        served = max(v.version for v in versions)
    if "end/best_step" in end:
        best = at(end["end/best_step"])
    elif "end/served_step" in end:
        best = served
    else:
        scored = [
            (v.scores["val/reward_mean"], v.version)
            for v in versions
            if math.isfinite(v.scores.get("val/reward_mean", math.nan))
        ]
        best = max(scored)[1] if scored else None
    marks: dict[int, list[str]] = {}
    if served is not None:
        marks.setdefault(served, []).append("served")
    if best is not None:
        marks.setdefault(best, []).append("best")
    return {version: " ".join(names) for version, names in marks.items()}
