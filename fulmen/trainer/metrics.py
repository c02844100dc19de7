"""Where training metrics go: a JSONL file, TensorBoard and a one-line console summary.

Every step's metrics are a flat ``dict[str, float]``; the JSONL file is the durable record
(one object per line with ``step``), TensorBoard gets the same scalars, and the console line
shows the few a person watches: reward, success and loss of a weight update, the kept share and
likelihood gain of an SFT round, the best and beam scores of an APO round, a demonstration
candidate's score, and the step's time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["MetricsLogger", "console_line", "read_metrics"]

logger = logging.getLogger("fulmen.train")

_CONSOLE_KEYS = (
    "reward/mean",
    "val/reward_mean",
    "task/success",
    "loss",
    "kl",
    "clip_fraction",
    "sft/kept_fraction",
    "sft/logprob_gain",
    "apo/best_score",
    "apo/beam_mean_score",
    "apo/beam_size",
    "apo/candidates",
    "demos/score",
    "demos/best_score",
    "demos/pool",
    "time/step_s",
    "time/round_s",
    "time/candidate_s",
)


class MetricsLogger:
    """Writes step metrics to ``run_dir/metrics.jsonl`` and, if asked, TensorBoard.

    Args:
        run_dir: the run's directory (created if missing).
        tensorboard: also write TensorBoard event files under ``run_dir/tensorboard``
            (needs the ``tensorboardX`` package from the ``train`` extra).
    """

    def __init__(self, run_dir: Path, *, tensorboard: bool = False) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")
        self._writer: Any = None
        self._sinks: list[Callable[[dict[str, Any]], None]] = []
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(str(run_dir / "tensorboard"))

    def add_sink(self, sink: Callable[[dict[str, Any]], None]) -> None:
        """Also give every record, as written to the file, to ``sink`` (which must not block).

        The run's record in the store is one (``fulmen.trainer.run_record``).
        """
        self._sinks.append(sink)

    def log(
        self,
        step: int,
        metrics: dict[str, float],
        *,
        labels: dict[str, str | int] | None = None,
        echo: bool = True,
    ) -> None:
        """Record ``metrics`` for ``step``; non-finite values are kept as ``null`` in JSONL.

        ``labels`` (the stage and its algorithm in a run with stages) go to the JSONL record
        only; TensorBoard gets the scalars.
        """
        record: dict[str, Any] = {"step": step, "time": time.time(), **(labels or {})}
        record.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for sink in self._sinks:
            sink(record)
        if self._writer is not None:
            for key, value in metrics.items():
                if math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if echo:
            logger.info("%s", console_line(step, metrics, labels=labels))

    def close(self) -> None:
        """Flush and close every sink."""
        self._file.close()
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def console_line(
    step: int, metrics: dict[str, float], *, labels: dict[str, str | int] | None = None
) -> str:
    """Return the one-line console summary of a step: the watched figures it has, in order.

    A run with stages names the step's algorithm (``step 3 [apo]: ...``).
    """
    algorithm = (labels or {}).get("algorithm")
    head = f"step {step}" + (f" [{algorithm}]" if algorithm else "")
    shown = [f"{k}={metrics[k]:.4g}" for k in _CONSOLE_KEYS if k in metrics]
    return f"{head}: {' '.join(shown)}" if shown else head


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read the records of a ``metrics.jsonl`` file, in order (a torn last line is ignored)."""
    records: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a crash mid-write leaves at most one partial line at the end
    return records
