"""``TrainingRun``: what every stage of one training run shares.

A ``TrainingRun`` holds what lives as long as the run: the started stack, the metrics logger,
the saved ``RunState``, the run's record in the store, the tasks and their draws (``RunTasks``),
the policy the engine serves (``PolicyServer``, which also puts it back when a killed run restarts)
and, with ``reward:``, the judge that scores every stage's rollouts (``RolloutScorer``). Each
stage sees it through its ``StageContext`` (``fulmen.trainer.context``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.settings import Settings
from fulmen.trainer.judging import RolloutScorer
from fulmen.trainer.metrics import MetricsLogger
from fulmen.trainer.policy_server import PolicyServer
from fulmen.trainer.run_tasks import RunTasks
from fulmen.trainer.served_models import ServedModels
from fulmen.trainer.stack import TrainingStack
from fulmen.trainer.state import RunState

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig
    from fulmen.trainer.run_record import RunRecorder

__all__ = ["TrainingRun"]


@dataclass
class TrainingRun:
    """What every stage of one run shares (see the module docstring).

    Attributes:
        config: the run's configuration.
        stack: the started store, engine, gateway and runner.
        metrics: the run's metrics stream.
        state: the run directory's saved progress.
        model_path: the base model's local directory.
        train_tasks / val_tasks: the tasks (``val_tasks`` already cut to
            ``validation.max_tasks``; empty without validation).
        uses_stages: the config has ``stages:`` (each stage gets its own directory and its
            metrics are labelled).
        settings: the environment as the run read it once (API keys named in the config).
        recorder: the run's record in the store (metrics, model versions); ``None``: none.
        tasks: the tasks and the draw of each step.
        policy: what the engine serves.
        scorer: the judge of ``reward:``; ``None`` without one.
    """

    config: TrainConfig
    stack: TrainingStack
    metrics: MetricsLogger
    state: RunState
    model_path: Path
    train_tasks: Sequence[Any]
    val_tasks: Sequence[Any]
    uses_stages: bool = False
    settings: Settings = field(default_factory=Settings)
    recorder: RunRecorder | None = None
    tasks: RunTasks = field(init=False)
    policy: PolicyServer = field(init=False)
    scorer: RolloutScorer | None = field(init=False)

    def __post_init__(self) -> None:
        config = self.config
        self.tasks = RunTasks(
            self.train_tasks, self.val_tasks, seed=config.seed, id_key=config.data.task_id_key
        )
        models = ServedModels(self.stack.engine, base=config.model, engine_kind=config.engine.kind)
        self.policy = PolicyServer(
            models, self.state, run_dir=config.run_dir, recorder=self.recorder
        )
        self.scorer = None
        if config.reward is not None:
            self.scorer = RolloutScorer(
                config.reward,
                store=self.stack.store,
                variable=self.settings.variable,
                cache_path=config.run_dir / "judge-cache.jsonl",
                store_url=self.stack.store_url,
            )
