"""The end of a run: serve the best validated version, and say loudly when validation fell.

Every validation of a run (before training, every ``validation.every`` steps, after each stage)
appends a ``Validated`` line to ``RUN_DIR/validations.jsonl``: its step (numbered across
stages), its ``val/*`` scores, each validation task's reward, and what was served then — the
full weights, the adapter, each role's adapter (paths relative to the run directory) and the
carried resources (prompt templates). The file outlives restarts, so a resumed run compares
every version validated since the run began; a step validated again (a run killed during its
closing validation) keeps its latest line.

At the end of the whole run (after the last stage's closing validation; once, whatever the
stages), ``end_run``:

* with ``validation.keep_best`` (the default) picks the version with the best score
  (``pick_best``; ties keep the later version): its mean reward over the validation tasks, a
  rollout that failed or gave no reward counted as ``validation.failed_rollouts`` says (0 by
  default; ``leave_out``: the mean over the tasks it scored, ``val/reward_mean``). When that is
  an earlier version than the last one — the model before training included — it makes the
  engine serve it again (its adapter hot-loaded, its full weights or the original base weights
  reloaded, its prompts carried) and publishes a resources version naming it, routed as the
  stage that validated it routed its calls (an agent that stage served from the base model
  stays on the base model; later rollouts use it; its metadata says ``keep_best`` and the step
  and stage it was kept from). When its files are gone (a full fine-tune keeps the weights of
  its last two steps only), it says so and keeps the last version;
* whatever ``keep_best`` says, compares the last validation with the one before training
  (``validation_change``): per-task paired differences over the validation tasks both ran,
  failed rollouts counted by the same rule (``leave_out``: over the tasks scored both times),
  and the "before -> after" it reports is the mean of each over exactly those tasks; it warns
  loudly when the last is more than two standard errors lower;
* logs what it decided as ``end/*`` metrics at the last validation's step (``metrics.jsonl``
  and the run's record in the store) and returns it as an ``EndOfRun``, whose ``summary`` the
  end-of-run summary of ``fulmen train`` prints.

``state.json`` keeps naming the policy training reached, so a finished run started again with
more steps trains on from it; the end of that run picks again among all its validations.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fulmen.types import Resource

if TYPE_CHECKING:
    from fulmen.trainer.training_run import TrainingRun
    from fulmen.types.limits import JsonData

__all__ = [
    "PRIMARY_SCORE",
    "Change",
    "FailedRollouts",
    "EndOfRun",
    "Validated",
    "end_run",
    "pick_best",
    "read_validations",
    "record_validation",
    "served_now",
    "validation_change",
]

logger = logging.getLogger("fulmen.train")

#: The validation metric each ``Validated`` line keeps: the mean over the tasks scored.
PRIMARY_SCORE = "val/reward_mean"

#: How a validation rollout that failed or gave no reward counts (``validation.failed_rollouts``).
FailedRollouts = Literal["score_zero", "leave_out"]

#: How many standard errors below the baseline the last validation may fall before the end of
#: the run warns.
FELL_STANDARD_ERRORS = 2.0

_FILE = "validations.jsonl"


class Validated(BaseModel):
    """One validation of a run and what was served when it ran.

    Attributes:
        run_id: the run it belongs to (a line of another run in the same directory is ignored).
        step: the run's step it validated (numbered across stages; 0: before training).
        stage / algorithm: the stage that validated it.
        scores: its ``val/*`` metrics; ``PRIMARY_SCORE`` among them.
        rewards: each validation task's reward, in the order of the validation tasks
            (``None``: its rollout failed or gave no reward).
        weights: the full-weight model directory served as the base (``None``: the original).
        adapter: the policy adapter served (``None``: none).
        role_adapters: with one adapter per role, each role's adapter.
        resources: the carried resources other than ``llm`` (prompt templates).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    step: int = Field(ge=0)
    stage: int = 0
    algorithm: str = ""
    scores: dict[str, float]
    rewards: list[float | None] = Field(default_factory=list[float | None])
    weights: str | None = None
    adapter: str | None = None
    role_adapters: dict[str, str] = Field(default_factory=dict[str, str])
    resources: dict[str, Resource] = Field(default_factory=dict[str, Resource])

    @property
    def score(self) -> float:
        """``val/reward_mean``: the mean over the tasks scored (NaN when none was)."""
        return self.scores.get(PRIMARY_SCORE, math.nan)

    @property
    def failed(self) -> int:
        """Its validation rollouts that failed or gave no reward."""
        return sum(r is None for r in self.rewards)

    def ranked_score(self, failed: FailedRollouts = "score_zero") -> float:
        """Return the score ``keep_best`` ranks it by: its mean reward over validation tasks.

        ``score_zero``: a task whose rollout failed or gave no reward counts as 0;
        ``leave_out``: the mean over the tasks scored (NaN when none was). A line written
        before per-task rewards were kept has only ``score``.
        """
        if not self.rewards:
            return self.score
        if failed == "score_zero":
            values = [0.0 if r is None else r for r in self.rewards]
        else:
            values = [r for r in self.rewards if r is not None]
        return math.fsum(values) / len(values) if values else math.nan

    @property
    def is_base(self) -> bool:
        """Whether it served the original model with no adapter."""
        return self.weights is None and self.adapter is None and not self.role_adapters

    def model_files(self) -> list[str]:
        """Return the directories of its weights and adapters, relative to the run directory."""
        named = [self.weights, self.adapter, *self.role_adapters.values()]
        return [path for path in named if path is not None]

    def name(self) -> str:
        """``step 3's version``; the step-0 base model says it is the model before training."""
        if self.step == 0 and self.is_base:
            return "step 0's version (the model before training)"
        return f"step {self.step}'s version"


def record_validation(run_dir: Path, validated: Validated) -> None:
    """Append ``validated`` to ``RUN_DIR/validations.jsonl``.

    A validation with a non-finite reward, or with no per-task rewards and a non-finite score,
    is not kept; one whose every rollout failed is (it scores 0 under ``score_zero``).
    """
    rewards = validated.rewards
    if any(r is not None and not math.isfinite(r) for r in rewards) or (
        not rewards and not math.isfinite(validated.score)
    ):
        return
    finite = {k: v for k, v in validated.scores.items() if math.isfinite(v)}
    line = validated.model_copy(update={"scores": finite}).model_dump_json()
    with (run_dir / _FILE).open("a", encoding="utf-8") as out:
        out.write(line + "\n")


def read_validations(run_dir: Path, run_id: str) -> list[Validated]:
    """Return run ``run_id``'s validations by step; a step validated again keeps its latest.

    A line that cannot be read (a torn last line after a crash) is skipped.
    """
    path = run_dir / _FILE
    if not path.exists():
        return []
    by_step: dict[int, Validated] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            validated = Validated.model_validate_json(line)
        except ValidationError:
            continue
        if validated.run_id == run_id:
            by_step[validated.step] = validated
    return [by_step[step] for step in sorted(by_step)]


def pick_best(
    validated: Sequence[Validated], *, failed: FailedRollouts = "score_zero"
) -> Validated | None:
    """Return the version with the highest ``ranked_score(failed)``; ties keep the later one.

    ``None`` when none has a finite score.
    """
    best: Validated | None = None
    best_score = -math.inf
    for candidate in sorted(validated, key=lambda v: v.step):
        score = candidate.ranked_score(failed)
        if math.isfinite(score) and (best is None or score >= best_score):
            best, best_score = candidate, score
    return best


@dataclass(frozen=True)
class Change:
    """The last validation against the one before training, paired task by task.

    Attributes:
        baseline / final: the mean reward of each over the ``tasks`` paired tasks.
        standard_error: of ``final - baseline``, from the per-task differences; NaN when it
            cannot be estimated (fewer than two tasks).
        tasks: the validation tasks it rests on: those both validations ran (under
            ``leave_out``, of those, the ones scored both times).
        left_out: validation tasks not paired (run by one of them only, or under
            ``leave_out`` a failed rollout in either).
        zeroed: failed rollouts counted as reward 0 (``score_zero``), both validations.
    """

    baseline: float
    final: float
    standard_error: float
    tasks: int
    left_out: int = 0
    zeroed: int = 0

    @property
    def delta(self) -> float:
        """``final - baseline``: the mean of the per-task differences."""
        return self.final - self.baseline

    @property
    def fell(self) -> bool:
        """Whether the final is more than two standard errors below the baseline."""
        if not math.isfinite(self.standard_error):
            return False
        return self.delta < -FELL_STANDARD_ERRORS * self.standard_error

    @property
    def errors_below(self) -> float:
        """How many standard errors the final is below the baseline (inf for an exact drop)."""
        if self.standard_error > 0:
            return -self.delta / self.standard_error
        return math.inf if self.delta < 0 else 0.0

    def line(self) -> str:
        """Return ``validation reward: before B -> after F (+D ± SE, paired over N ...)``."""
        error = f" ± {self.standard_error:.3f}" if math.isfinite(self.standard_error) else ""
        notes = [f"paired over {self.tasks} validation tasks"]
        if self.zeroed:
            notes.append(f"{self.zeroed} failed validation rollouts counted as 0")
        if self.left_out:
            notes.append(f"{self.left_out} tasks left out (not scored by both validations)")
        return (
            f"validation reward: before {self.baseline:.3f} -> after {self.final:.3f} "
            f"({self.delta:+.3f}{error}, {'; '.join(notes)})"
        )


def validation_change(
    baseline: Validated, final: Validated, *, failed: FailedRollouts = "score_zero"
) -> Change | None:
    """Compare ``final`` with ``baseline`` task by task (see ``Change``).

    The validation tasks are a prefix of one list (``validation.max_tasks`` cuts it), so the
    first tasks of two validations of different lengths are the same tasks. ``None`` when no
    task can be paired (a line without per-task rewards, or nothing scored both times).
    """
    ran = min(len(baseline.rewards), len(final.rewards))
    both = list(zip(baseline.rewards[:ran], final.rewards[:ran], strict=True))
    if failed == "score_zero":
        pairs = [(a or 0.0, b or 0.0) for a, b in both]
        zeroed = sum((a is None) + (b is None) for a, b in both)
    else:
        pairs = [(a, b) for a, b in both if a is not None and b is not None]
        zeroed = 0
    if not pairs:
        return None
    differences = [b - a for a, b in pairs]
    error = (
        statistics.stdev(differences) / math.sqrt(len(differences))
        if len(differences) >= 2
        else math.nan
    )
    left_out = max(len(baseline.rewards), len(final.rewards)) - len(pairs)
    return Change(
        baseline=math.fsum(a for a, _ in pairs) / len(pairs),
        final=math.fsum(b for _, b in pairs) / len(pairs),
        standard_error=error,
        tasks=len(pairs),
        left_out=left_out,
        zeroed=zeroed,
    )


@dataclass
class EndOfRun:
    """What the end of a run decided (see the module docstring).

    Attributes:
        final: the run's last validation.
        keep_best: ``validation.keep_best``.
        failed: ``validation.failed_rollouts``: how the scores count a failed rollout.
        best: the best-scoring version when it is an earlier one than ``final``.
        kept: ``best``, when the run ends serving it.
        missing: the files of ``best`` that no longer exist (it was not served again).
        change: the last validation against the one before training (``None``: no baseline,
            or no task to pair).
        baseline: the validation before training (``None``: the run has none, or it is the
            last one).
    """

    final: Validated
    keep_best: bool
    failed: FailedRollouts = "score_zero"
    baseline: Validated | None = None
    best: Validated | None = None
    kept: Validated | None = None
    missing: tuple[str, ...] = ()
    change: Change | None = None

    def warnings(self) -> list[str]:
        """Return the lines not to be missed: validation fell well below the baseline."""
        change = self.change
        if change is None or not change.fell:
            return []
        below = change.errors_below
        errors = (
            "every task fell as much" if math.isinf(below) else f"{below:.1f} standard errors below"
        )
        return [
            f"!!! WARNING: validation FELL during training: {change.baseline:.3f} before training "
            f"-> {change.final:.3f} after ({change.delta:+.3f}; {errors}, "
            f"paired over {change.tasks} validation tasks)"
        ]

    def notes(self) -> list[str]:
        """Say which version the run ends serving when the best is not the last one."""
        best, final = self.best, self.final
        if best is None:
            return []
        scores = (
            f"{best.ranked_score(self.failed):.3f} beat the final "
            f"{final.ranked_score(self.failed):.3f}"
        )
        if self.failed == "leave_out" and (best.failed or final.failed):
            scores += " (each over the tasks it scored)"
        if self.kept is not None:
            return [f"serving {best.name()}: its validation {scores} (validation.keep_best)"]
        if self.missing:
            return [
                f"{best.name()} had the best validation ({scores}), but its files are gone "
                f"({', '.join(self.missing)}): serving the final version"
            ]
        return [
            f"{best.name()} had the best validation ({scores}); validation.keep_best is off: "
            "serving the final version"
        ]

    def summary(self) -> list[str]:
        """Return the lines ``fulmen train`` prints at the end.

        Warnings first, then the paired change before -> after, then which version is served.
        """
        return [*self.warnings(), *self.comparison(), *self.notes()]

    def comparison(self) -> list[str]:
        """Return the before -> after line: paired, or why there is no pair to compare."""
        if self.change is not None:
            return [self.change.line()]
        if self.baseline is None:
            return []
        before, after = self.baseline, self.final
        return [
            "validation reward: no validation task was scored both before and after training "
            f"({before.failed} of {len(before.rewards)} rollouts failed before, "
            f"{after.failed} of {len(after.rewards)} after): nothing to compare"
        ]

    def metrics(self) -> dict[str, float]:
        """Return the ``end/*`` metrics of the decision (logged at the last validation's step)."""
        served = self.kept or self.final
        out = {
            "end/served_step": float(served.step),
            "end/served_reward_mean": served.ranked_score(self.failed),
            "end/final_reward_mean": self.final.ranked_score(self.failed),
            "end/kept_earlier": float(self.kept is not None),
        }
        if self.best is not None:
            out["end/best_step"] = float(self.best.step)
            out["end/best_reward_mean"] = self.best.ranked_score(self.failed)
        if self.missing:
            out["end/best_files_missing"] = 1.0
        change = self.change
        if change is not None:
            out["end/val_before"] = change.baseline
            out["end/val_after"] = change.final
            out["end/val_change"] = change.delta
            out["end/val_change_se"] = change.standard_error
            out["end/val_change_tasks"] = float(change.tasks)
            out["end/val_fell"] = float(change.fell)
        return out


class Publisher(Protocol):
    """Publishes a resources version naming what the engine serves (``StageRollouts``)."""

    async def publish(
        self,
        resources: Mapping[str, Resource] | None = None,
        *,
        metadata: Mapping[str, JsonData] | None = None,
        route_as: int | None = None,
    ) -> int:
        """Store the served policy plus the carried resources; return the version.

        Its calls are routed as stage ``route_as`` routes them (``None``: the publisher's own).
        """
        ...


async def end_run(training: TrainingRun, publisher: Publisher) -> EndOfRun | None:
    """Decide, at the end of the whole run, which validated version it ends serving.

    ``publisher`` is the last stage's rollouts: a version served again is published through
    them. Returns ``None`` when the run did not validate. See the module docstring.
    """
    config = training.config
    validation = config.validation
    if validation is None or not training.val_tasks:
        return None
    validated = read_validations(config.run_dir, training.state.run_id)
    if not validated:
        return None
    final = validated[-1]
    failed = validation.failed_rollouts
    report = EndOfRun(final=final, keep_best=validation.keep_best, failed=failed)
    baseline = validated[0]
    if baseline.step == 0 and baseline is not final:
        report.baseline = baseline
        report.change = validation_change(baseline, final, failed=failed)
    best = pick_best(validated, failed=failed)
    if best is not None and best.step != final.step:
        report.best = best
        if validation.keep_best:
            report.missing = tuple(
                path for path in best.model_files() if not (config.run_dir / path).exists()
            )
            if not report.missing:
                await _serve_again(training, best, publisher)
                report.kept = best
    _report(training, report)
    return report


async def _serve_again(training: TrainingRun, kept: Validated, publisher: Publisher) -> None:
    """Make the engine serve ``kept`` instead of what it serves now, and publish it.

    Through the policy's ``ServedModels``: the files the ``PolicyServer`` records (what
    training reached) are not changed.
    """
    run_dir = training.config.run_dir
    models, reached = training.policy.models, training.policy.served
    reloaded = kept.weights != reached.weights
    if reloaded:
        weights = None if kept.weights is None else run_dir / kept.weights
        await models.reload_weights(weights, f"weights-{kept.step}-kept")  # retires adapters
    if kept.adapter is not None and (reloaded or kept.adapter != reached.adapter):
        await models.load_adapter(run_dir / kept.adapter, f"policy-{kept.step}-kept")
    elif kept.adapter is None and reached.adapter is not None and not reloaded:
        await models.retire_adapters()
    for role in sorted(set(reached.role_adapters) - set(kept.role_adapters)):
        await models.retire_role_adapter(role)
    for role, path in sorted(kept.role_adapters.items()):
        if path != reached.role_adapters.get(role):
            name = f"policy-{role}-{kept.step}-kept"
            await models.load_role_adapter(role, run_dir / path, name)
    # The kept version's prompts are published; state.json keeps what training reached (the
    # weights and adapter it names are not changed either), so a resumed run trains on from it.
    state = training.state
    reached_resources = state.resources
    state.resources = dict(kept.resources)
    try:
        # routed as its own stage did: an agent it served from the base model stays there
        stage = min(kept.stage, len(training.config.plan()) - 1)
        await publisher.publish(
            metadata={"keep_best": True, "kept_step": kept.step, "kept_stage": kept.stage},
            route_as=stage,
        )
    finally:
        state.resources = reached_resources


def _report(training: TrainingRun, report: EndOfRun) -> None:
    """Log the decision's metrics and lines (warnings as warnings)."""
    plan = training.config.plan()
    index = min(training.state.stage, len(plan) - 1)
    labels: dict[str, str | int] = (
        {"stage": index, "algorithm": plan[index].name} if training.uses_stages else {}
    )
    training.metrics.log(report.final.step, report.metrics(), labels=labels, echo=False)
    for line in report.warnings():
        logger.warning("%s", line)
    for line in report.notes():
        logger.info("%s", line)


def served_now(
    training: TrainingRun,
    *,
    step: int,
    stage: int,
    algorithm: str,
    scores: Mapping[str, float],
    rewards: Sequence[float | None],
) -> Validated:
    """Describe what ``training`` serves now, validated at the run's ``step`` with ``scores``."""
    state, served = training.state, training.policy.served
    return Validated(
        run_id=state.run_id,
        step=step,
        stage=stage,
        algorithm=algorithm,
        scores={k: v for k, v in scores.items() if k.startswith("val/")},
        rewards=list(rewards),
        weights=served.weights,
        adapter=served.adapter,
        role_adapters=dict(served.role_adapters),
        resources=dict(state.resources),
    )
