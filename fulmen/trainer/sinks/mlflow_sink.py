"""The MLflow sink: one MLflow run per fulmen run (found again by tag on resume)."""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fulmen.trainer.sinks.config import MlflowSettings

__all__ = ["RUN_ID_TAG", "MlflowSink", "flat_params", "mlflow_key"]

logger = logging.getLogger("fulmen.train")

#: The tag that names the fulmen run an MLflow run logs.
RUN_ID_TAG = "fulmen.run_id"

# MLflow's limits: names of letters, digits and ``_-. /``, 250 characters; values of 6000;
# 1000 metrics and 100 params per batch.
_BAD_KEY = re.compile(r"[^\w.\- /]")
_MAX_KEY, _MAX_VALUE = 250, 6000
_METRICS_PER_BATCH, _PARAMS_PER_BATCH = 1000, 100


def mlflow_key(key: str) -> str:
    """Return ``key`` as a name MLflow accepts: other characters and empty path parts as ``_``.

    Reward names are free text (``train/reward/<name>``); MLflow refuses a name with, say, a
    ``:`` on some systems or a ``//``, which would otherwise end the run mid-way.
    """
    parts = [_BAD_KEY.sub("_", p) for p in key.split("/")]
    return "/".join(p if p.strip(".") else p.replace(".", "_") or "_" for p in parts)[:_MAX_KEY]


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a JSON config into MLflow params: dotted keys, lists as JSON, ``None`` left out."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}."))
        elif value is not None:
            text = value if isinstance(value, str) else json.dumps(value)
            out[mlflow_key(name)] = text[:_MAX_VALUE]
    return out


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class MlflowSink:
    """Logs each step's finite metrics to an MLflow run, and the run's config as its params.

    The MLflow run carries the tag ``fulmen.run_id``; a resumed fulmen run finds it by that tag
    in the experiment and logs on (its params are kept: MLflow params never change, so a value
    that differs after a resume is reported and left out). Works with ``mlflow-skinny``
    (the ``mlflow`` extra) against a tracking server or a ``file://`` store.

    Args:
        settings: the tracking URI, experiment and run name.
        run_dir: the run's folder (its name is the default run name).
        run_id: the fulmen run's id.
        run_config: the run's config as JSON data.
    """

    def __init__(
        self,
        settings: MlflowSettings,
        *,
        run_dir: Path,
        run_id: str,
        run_config: Mapping[str, Any],
    ) -> None:
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=settings.tracking_uri)
        experiment = self._client.get_experiment_by_name(settings.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self._client.create_experiment(settings.experiment)
        )
        found = self._client.search_runs(
            [experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1
        )
        if found:
            self.run_id: str = found[0].info.run_id
            self._client.update_run(self.run_id, status="RUNNING")
        else:
            run = self._client.create_run(
                experiment_id,
                run_name=settings.run_name or run_dir.name,
                tags={RUN_ID_TAG: run_id, "fulmen.run_dir": str(run_dir)},
            )
            self.run_id = run.info.run_id
        self._log_params(flat_params(run_config))

    def _log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        logged = self._client.get_run(self.run_id).data.params
        changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
        if changed:
            logger.warning(
                "MLflow keeps a run's first params; changed since the run started, not logged: %s",
                ", ".join(changed),
            )
        new = [Param(k, v) for k, v in params.items() if k not in logged]
        for batch in _chunks(new, _PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=batch)

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log the finite values at ``step`` in batches (names made valid by ``mlflow_key``)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = [
            Metric(mlflow_key(k), v, now, step) for k, v in metrics.items() if math.isfinite(v)
        ]
        for batch in _chunks(values, _METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=batch)

    def close(self, *, failed: bool = False) -> None:
        """End the MLflow run as ``FINISHED``, or ``FAILED`` when the fulmen run failed."""
        self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
