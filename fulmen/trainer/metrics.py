"""Where training metrics go: a JSONL file, the metrics sinks and a one-line console summary.

Every step's metrics are a flat ``dict[str, float]``; the JSONL file is the durable record
(one object per line with ``step``), each metrics sink (TensorBoard, Weights & Biases, MLflow:
``fulmen.trainer.sinks``) gets the same scalars, and the console line shows the few a person
watches: reward, success and loss of a weight update, the kept share and likelihood gain of an
SFT round, the best and beam scores of an APO round, a demonstration candidate's score, and the
step's time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from fulmen.trainer.sinks import MetricsSink

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
    """Writes step metrics to ``run_dir/metrics.jsonl`` and to each metrics sink.

    Args:
        run_dir: the run's directory (created if missing).
        sinks: the open metrics sinks (``fulmen.trainer.sinks.open_sinks``); closed with this
            logger.
        tensorboard: also write TensorBoard event files under ``run_dir/tensorboard`` (the
            TensorBoard sink; needs ``tensorboardX``, the ``tensorboard`` extra).
    """

    def __init__(
        self, run_dir: Path, *, sinks: Sequence[MetricsSink] = (), tensorboard: bool = False
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self.sinks: list[MetricsSink] = list(sinks)
        self._failing: set[int] = set()  # sinks whose write failed (warned about once)
        if tensorboard:
            from fulmen.trainer.sinks.tensorboard_sink import TensorBoardSink

            self.sinks.append(TensorBoardSink(run_dir / "tensorboard"))

    def add_sink(self, sink: Callable[[dict[str, Any]], None]) -> None:
        """Also give every record, as written to the file, to ``sink`` (which must not block).

        The run's record in the store is one (``fulmen.trainer.run_record``); unlike a
        ``MetricsSink`` it gets the whole record, labels and ``null`` values included.
        """
        self._listeners.append(sink)

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
        only; the metrics sinks get the scalars. A sink that fails to write is warned about
        once and the run goes on: the JSONL file keeps every record.
        """
        record: dict[str, Any] = {"step": step, "time": time.time(), **(labels or {})}
        record.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for listener in self._listeners:
            listener(record)
        for sink in self.sinks:
            self._write(sink, step, metrics)
        if echo:
            logger.info("%s", console_line(step, metrics, labels=labels))

    def _write(self, sink: MetricsSink, step: int, metrics: dict[str, float]) -> None:
        try:
            sink.write(step, metrics)
        except Exception as exc:  # a tracking server's hiccup must not end hours of training
            if id(sink) not in self._failing:
                self._failing.add(id(sink))
                logger.warning(
                    "metrics sink %s failed to write step %d (%s); metrics.jsonl keeps every "
                    "step, and later failures of this sink are logged at debug level",
                    type(sink).__name__,
                    step,
                    exc,
                )
            else:
                logger.debug("metrics sink %s: %s", type(sink).__name__, exc)

    def close(self, *, failed: bool = False) -> None:
        """Close the file and every sink (``failed``: the run ended with an error)."""
        self._file.close()
        for sink in self.sinks:
            try:
                sink.close(failed=failed)
            except Exception as exc:
                logger.warning("metrics sink %s failed to close: %s", type(sink).__name__, exc)

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(failed=exc_type is not None)


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
