"""``StageRun``: the trainer's ``context.run``, the facts of the run one stage reads.

The stage's own directory (``RUN_DIR/stages/<index>-<name>`` in a run with ``stages:``, the run
directory itself otherwise), the base model, the seed, the success threshold, the services'
addresses and the environment as the run read it once.
"""

from __future__ import annotations

from pathlib import Path

from fulmen.trainer.training_run import TrainingRun

__all__ = ["StageRun"]


class StageRun:
    """The facts of the run as stage ``run_dir`` sees them.

    Args:
        training: the run's shared services and state.
        run_dir: the stage's directory (created if missing).
    """

    def __init__(self, training: TrainingRun, run_dir: Path) -> None:
        self._training = training
        self._run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)

    @property
    def run_dir(self) -> Path:
        """Return the stage's directory (the run directory itself for a run without stages)."""
        return self._run_dir

    @property
    def model_path(self) -> Path:
        """The base model's local directory."""
        return self._training.model_path

    @property
    def seed(self) -> int:
        """The run's seed."""
        return self._training.config.seed

    @property
    def success_threshold(self) -> float:
        """The reward that counts as a task success."""
        return self._training.config.success_threshold

    @property
    def engine_url(self) -> str:
        """The engine's ``.../v1`` URL."""
        return self._training.stack.engine_url

    @property
    def engine_model(self) -> str:
        """The model name the engine serves the policy under now."""
        return self._training.policy.models.model_name

    @property
    def engine_dtype(self) -> str:
        """The precision the engine samples in (``engine.dtype``)."""
        return self._training.config.engine.dtype

    @property
    def store_url(self) -> str:
        """The run's store, as ``fulmen rollouts --store`` takes it."""
        return self._training.stack.store_url

    def variable(self, name: str) -> str | None:
        """Return the environment variable ``name`` as the run's settings read it."""
        return self._training.settings.variable(name)

    def check_services(self) -> None:
        """Raise if the runner stopped on its own."""
        self._training.stack.check_runner()
