"""``RunRecorder``: a training run's record in the store — its start, metrics, models and end.

The trainer starts the run (``Store.start_run``, the same ``run_id`` on every restart of a run
directory), hands the recorder every metrics record it writes to ``metrics.jsonl`` and every
model it serves, and ends the run with its status. Metrics and model versions are queued and
written by a background task in batches (one ``add_run_metrics`` call per flush), so a slow or
briefly unreachable store delays the record, never a training step; a failed write is kept
and tried again at the next flush.

A served model becomes a ``ModelVersion`` once its record is complete: the first resources
version published after it was served is the one that serves it, and the validation logged at
its step gives its scores. A later step's metrics (no validation at that step), the next model,
or the end of the run close it without scores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fulmen.errors import FulmenError
from fulmen.types import ModelKind, ModelVersion, Resources, Run, RunMetrics, RunStatus

if TYPE_CHECKING:
    from fulmen.store.roles import RunLog
    from fulmen.trainer.config import TrainConfig

__all__ = ["RunRecorder", "metrics_record", "new_run"]

logger = logging.getLogger("fulmen.train")

_SCORE_PREFIX = "val/"
_BATCH = 500  # metrics records per store call (well under the HTTP body limit)


def new_run(config: TrainConfig, run_id: str) -> Run:
    """Describe the run of ``config`` as it starts: named after its directory, on this host.

    The config is stored as its JSON form (a non-finite number becomes ``null``).
    """
    return Run(
        run_id=run_id,
        name=config.run_dir.resolve().name or run_id,
        config=json.loads(config.model_dump_json()),
        host=socket.gethostname()[:256],
        started_at=time.time(),
    )


def metrics_record(run_id: str, record: dict[str, Any]) -> RunMetrics:
    """Turn one ``metrics.jsonl`` record into the store's ``RunMetrics``.

    Finite numbers (numeric labels such as the stage index included) go to ``values``, strings
    to ``text``; a metric that was not finite (``null`` in the file) is left out.
    """
    values: dict[str, float] = {}
    text: dict[str, str] = {}
    for key, value in record.items():
        if key in ("step", "time"):
            continue
        if isinstance(value, str):
            text[key] = value
        elif (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            values[key] = float(value)
    return RunMetrics(
        run_id=run_id, step=int(record["step"]), time=record["time"], values=values, text=text
    )


class RunRecorder:
    """Records one run in ``store`` (see the module docstring).

    Use ``await start()`` before training and ``await finish(status)`` after it, with the
    store still open; in between, ``metrics``, ``model_served`` and ``resources_published``
    return at once.

    Args:
        store: the run's store.
        run: the run as it starts (``run_id``, name, config, host, ``started_at``).
        flush_s: seconds between background writes.
        max_pending: metrics records kept while the store cannot be written; past it the
            oldest are dropped (the file keeps them all) and a warning says how many.
        finish_timeout_s: how long ``finish`` waits for the last writes before giving up.
    """

    def __init__(
        self,
        store: RunLog,
        run: Run,
        *,
        flush_s: float = 1.0,
        max_pending: int = 100_000,
        finish_timeout_s: float = 30.0,
    ) -> None:
        self.store = store
        self.run = run
        self._flush_s = flush_s
        self._finish_timeout_s = finish_timeout_s
        self._max_pending = max_pending
        self._metrics: list[RunMetrics] = []
        self._versions: list[ModelVersion] = []
        self._open: dict[str, Any] | None = None  # the served model whose record is not complete
        self._next_version = 1
        self._dropped = 0
        self._failing = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id

    async def start(self) -> Run:
        """Record the run as running (a restart resumes it) and start the background writer."""
        self.run = await self.store.start_run(self.run)
        known = await self.store.list_model_versions(self.run_id)
        self._next_version = max((v.version for v in known), default=0) + 1
        self._task = asyncio.create_task(self._write_loop(), name=f"run-record-{self.run_id}")
        return self.run

    # -- what the trainer reports (never blocks) ----------------------------------------------

    def metrics(self, record: dict[str, Any]) -> None:
        """Queue one metrics record (as written to ``metrics.jsonl``)."""
        try:
            converted = metrics_record(self.run_id, record)
        except ValidationError as exc:  # the file has it; the store cannot hold it
            logger.warning("run %s: a metrics record is not stored: %s", self.run_id, exc)
            return
        self._metrics.append(converted)
        self._bound_pending()
        if self._open is not None:
            self._score_open(converted)

    def model_served(self, kind: ModelKind, path: Path, step: int) -> None:
        """Note that the engine now serves the model at ``path`` (saved at ``step``)."""
        self._close_open()
        self._open = {
            "run_id": self.run_id,
            "version": self._next_version,
            "step": step,
            "kind": kind,
            "path": str(path.resolve()),
        }
        self._next_version += 1

    def resources_published(self, resources: Resources) -> None:
        """Note a published resources version: the first after a model is the one serving it."""
        if self._open is not None and "resources_version" not in self._open:
            self._open["resources_version"] = resources.version
            self._open["resources_id"] = resources.resources_id

    # -- ending ---------------------------------------------------------------------------------

    async def finish(self, status: RunStatus) -> None:
        """Write what is queued, then end the run with ``status``; never raises a store error.

        Waits at most ``finish_timeout_s`` in all: a store that cannot be reached then leaves
        the run ``running`` in the store (the log says so), and the training result stands.
        """
        self._close_open()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            async with asyncio.timeout(self._finish_timeout_s):
                await self._flush()
                await self.store.update_run(self.run_id, status=status, ended_at=time.time())
        except (FulmenError, OSError, TimeoutError) as exc:
            logger.warning("could not record the end of run %s in the store: %s", self.run_id, exc)

    # -- internals ------------------------------------------------------------------------------

    def _bound_pending(self) -> None:
        excess = len(self._metrics) - self._max_pending
        if excess > 0:
            del self._metrics[:excess]
            self._dropped += excess

    def _score_open(self, record: RunMetrics) -> None:
        assert self._open is not None
        if record.step > self._open["step"]:
            self._close_open()  # no validation at the model's step
        elif record.step == self._open["step"]:
            scores = {k: v for k, v in record.values.items() if k.startswith(_SCORE_PREFIX)}
            if scores:
                self._open["scores"] = scores
                self._close_open()

    def _close_open(self) -> None:
        if self._open is not None:
            self._versions.append(ModelVersion.model_validate(self._open))
            self._open = None
            self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            # Not asyncio.wait_for: on Python 3.11 it can swallow the cancellation that stops
            # this loop (bpo-42130), and ``finish`` would wait for it forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._flush_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
            except (FulmenError, OSError) as exc:
                if not self._failing:
                    logger.warning(
                        "run %s: the store refused its record (%s); retrying", self.run_id, exc
                    )
                self._failing = True
            else:
                self._failing = False

    async def _flush(self) -> None:
        """Write the queued metrics, then the queued model versions; keep what failed."""
        if self._dropped:
            logger.warning(
                "run %s: %d metrics records were not written to the store (it was unreachable "
                "too long); metrics.jsonl has them",
                self.run_id,
                self._dropped,
            )
            self._dropped = 0
        while self._metrics:
            batch, self._metrics = self._metrics[:_BATCH], self._metrics[_BATCH:]
            try:
                await self.store.add_run_metrics(batch)
            except BaseException:
                self._metrics = batch + self._metrics  # written again later (idempotent)
                self._bound_pending()
                raise
        while self._versions:
            await self.store.add_model_version(self._versions[0])
            self._versions.pop(0)
