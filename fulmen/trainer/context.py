"""``StageContext``: the trainer's ``fulmen.algorithms.context.AlgorithmContext`` for one stage.

A ``StageContext`` is what one algorithm gets of the run's ``TrainingRun``
(``fulmen.trainer.training_run``) for one stage: five capability objects, each in its own module.
The stage's identity is decided here: its directory (``RUN_DIR/stages/<index>-<name>`` in a run
with ``stages:``) and the start of its rollout ids (``rollout_prefix``).
"""

from __future__ import annotations

from fulmen.trainer.policy_server import PolicyServer
from fulmen.trainer.run_facts import StageRun
from fulmen.trainer.run_tasks import RunTasks
from fulmen.trainer.stage_progress import StageProgress
from fulmen.trainer.stage_rollouts import StageRollouts
from fulmen.trainer.training_run import TrainingRun

__all__ = ["StageContext", "rollout_prefix"]


class StageContext:
    """The ``AlgorithmContext`` of stage ``index`` (named ``name``) of a run.

    ``tasks`` and ``policy`` are the run's own (they carry over from stage to stage); ``run``,
    ``rollouts`` and ``progress`` are the stage's.

    Args:
        training: the run's shared services and state.
        index: the stage's position in the config's plan.
        name: the stage's algorithm name (labels its metrics).
    """

    def __init__(self, training: TrainingRun, *, index: int, name: str) -> None:
        base = training.config.run_dir
        run_dir = base / "stages" / f"{index}-{name}" if training.uses_stages else base
        state = training.state
        prefix = rollout_prefix(state.run_id, state.generation, index)
        self._run = StageRun(training, run_dir)
        self._rollouts = StageRollouts(training, index=index, name=name, prefix=prefix)
        self._progress = StageProgress(training, self._rollouts, index=index, name=name)
        self._training = training

    @property
    def run(self) -> StageRun:
        """The facts of the run: directory, model, seed, threshold, services."""
        return self._run

    @property
    def tasks(self) -> RunTasks:
        """The run's tasks and the seeded draw of each step."""
        return self._training.tasks

    @property
    def rollouts(self) -> StageRollouts:
        """Publishing resources, running tasks and reading what the rollouts recorded."""
        return self._rollouts

    @property
    def policy(self) -> PolicyServer:
        """What the engine serves, and serving a new policy."""
        return self._training.policy

    @property
    def progress(self) -> StageProgress:
        """The stage's saved progress, saving it, validating and logging."""
        return self._progress


def rollout_prefix(run_id: str, generation: int, stage: int) -> str:
    """Return the start of the rollout ids of ``stage`` in start ``generation`` of run ``run_id``.

    Stage 0 leaves the stage out (``3f9a1c2e-g1``; stage 2: ``3f9a1c2e-g1-st2``).
    """
    return f"{run_id}-g{generation}" + (f"-st{stage}" if stage else "")
