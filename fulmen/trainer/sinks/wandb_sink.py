"""The Weights & Biases sink: one W&B run per fulmen run, resumed when the fulmen run resumes."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fulmen.trainer.sinks.config import WandbSettings

__all__ = ["WandbSink", "wandb_run_id"]

# W&B run ids may not hold these characters (and are at most 64 long).
_BAD_ID = re.compile(r"[/\\#?%:\s]")


def wandb_run_id(run_id: str) -> str:
    """Return the W&B run id of fulmen run ``run_id``: the same id, made valid for W&B."""
    return _BAD_ID.sub("-", run_id)[:64] or "fulmen"


class WandbSink:
    """Logs each step's finite metrics to a W&B run whose id is the fulmen run's id.

    A resumed fulmen run resumes the same W&B run (``resume="allow"``), so its charts continue;
    steps logged again after a restart are dropped by W&B (its steps only increase), which is
    what the JSONL file's repeated step means anyway. The run's config becomes the W&B config.
    W&B's local files go under ``RUN_DIR/wandb`` unless ``WANDB_DIR`` says otherwise; W&B does
    not capture the trainer's console (its progress bar would be logged frame by frame).

    Args:
        settings: project, entity, mode, name, group, tags.
        run_dir: the run's folder (its name is the default display name).
        run_id: the fulmen run's id (``state.json``).
        run_config: the run's config as JSON data.
        environ: the environment as the run read it (``fulmen.settings.Settings.environ``):
            a ``WANDB_DIR`` there keeps W&B's files where it says.
    """

    def __init__(
        self,
        settings: WandbSettings,
        *,
        run_dir: Path,
        run_id: str,
        run_config: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        import wandb

        self._run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            mode=settings.mode,
            name=settings.name or run_dir.name,
            group=settings.group,
            tags=settings.tags or None,
            id=wandb_run_id(run_id),
            resume="allow",
            dir=None if (environ or {}).get("WANDB_DIR") else str(run_dir),
            config=dict(run_config),
            # A resumed run whose config changed records the new one.
            allow_val_change=True,
            settings=wandb.Settings(console="off"),
        )

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log the finite values at ``step`` (W&B's charts have no place for NaN rows)."""
        values = {k: v for k, v in metrics.items() if math.isfinite(v)}
        if values:
            self._run.log(values, step=step)

    def close(self, *, failed: bool = False) -> None:
        """Finish the W&B run, marked failed (exit code 1) when the fulmen run failed."""
        self._run.finish(exit_code=1 if failed else 0)
