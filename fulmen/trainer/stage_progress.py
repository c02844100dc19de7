"""``StageProgress``: the trainer's ``context.progress`` for one stage.

The stage's saved progress comes from the run's ``state.json`` (``RunState``), with paths made
absolute; ``save`` records a finished step there (with what the engine serves then, which the
``PolicyServer`` keeps in the same state). Steps are numbered in the run's metrics stream after
the earlier stages' (``RunState.run_step``); in a run with ``stages:`` each metrics record is
labelled with its stage and algorithm.
"""

from __future__ import annotations

from pathlib import Path

from fulmen.trainer.memory import trim_freed_memory
from fulmen.trainer.stage_rollouts import StageRollouts
from fulmen.trainer.training_run import TrainingRun
from fulmen.trainer.validation import validate

__all__ = ["StageProgress"]


class StageProgress:
    """Where stage ``index`` (named ``name``) stands, and what it records.

    Args:
        training: the run's shared services and state.
        rollouts: the stage's rollouts (validation runs through them).
        index: the stage's position in the config's plan.
        name: the stage's algorithm name (labels its metrics).
    """

    def __init__(
        self, training: TrainingRun, rollouts: StageRollouts, *, index: int, name: str
    ) -> None:
        self._training = training
        self._rollouts = rollouts
        self._index = index
        self._name = name

    @property
    def step(self) -> int:
        """Steps of the current stage completed and checkpointed."""
        return self._training.state.step

    @property
    def checkpoint(self) -> Path | None:
        """The stage's last checkpoint directory."""
        state = self._training.state
        return None if state.checkpoint is None else state.run_dir / state.checkpoint

    @property
    def validation_every(self) -> int | None:
        """Validate between steps every this many steps (``None``: no validation)."""
        validation = self._training.config.validation
        if validation is None or not self._training.tasks.val:
            return None
        return validation.every

    def save(self, step: int, *, checkpoint: Path | None = None) -> None:
        """Record ``step`` steps of this stage as done (and the served weights and adapter)."""
        state = self._training.state
        state.step = step
        if checkpoint is not None:
            state.checkpoint = str(checkpoint.relative_to(self._training.config.run_dir))
        state.save()

    async def validate(self, step: int) -> dict[str, float] | None:
        """Validate the served policy with the carried resources; log at ``step``.

        What was validated is added to ``RUN_DIR/validations.jsonl``
        (``fulmen.trainer.validation``).
        """
        return await validate(
            self._training,
            self._rollouts,
            step=step,
            stage=self._index,
            algorithm=self._name,
            log=self.log,
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` at this stage's ``step`` in the run's metrics stream.

        Every algorithm's loop calls this once per step, after its update: the memory the step
        freed goes back to the system here (``trim_freed_memory``), and the trainer's
        resident memory joins the step's metrics (``memory/rss_gb``, ``memory/trimmed_gb``).
        """
        training = self._training
        metrics = {**metrics, **trim_freed_memory()}
        labels = {"stage": self._index, "algorithm": self._name} if training.uses_stages else {}
        training.metrics.log(training.state.run_step(step), metrics, labels=labels)
