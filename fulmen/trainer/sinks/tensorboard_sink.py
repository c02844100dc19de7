"""The TensorBoard sink: every finite metric as a scalar event under ``RUN_DIR/tensorboard``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

__all__ = ["TensorBoardSink"]


class TensorBoardSink:
    """Writes each step's finite metrics as TensorBoard scalars (``tensorboardX``).

    Args:
        log_dir: the folder of the event files (``tensorboard --logdir`` it).
    """

    def __init__(self, log_dir: Path) -> None:
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(str(log_dir))

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Add each finite value as a scalar at ``step``; NaN and infinities are left out."""
        for key, value in metrics.items():
            if math.isfinite(value):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self, *, failed: bool = False) -> None:
        """Flush and close the event file (``failed`` changes nothing for TensorBoard)."""
        self._writer.close()
