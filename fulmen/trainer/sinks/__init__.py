"""Metrics sinks: the tracking tools (TensorBoard, Weights & Biases, MLflow) a run also logs to.

``fulmen.trainer.metrics.MetricsLogger`` writes every step's metrics to ``RUN_DIR/metrics.jsonl``
and hands the same scalars to each sink the config's ``metrics.sinks`` opens here. A sink is
anything with ``write(step, metrics)`` and ``close(failed=...)`` (``MetricsSink``); each
implementation imports its library only when opened, and the config refuses a sink whose
library is missing (``fulmen.trainer.sinks.config``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from fulmen.errors import ConfigError
from fulmen.trainer.sinks.config import MetricsConfig, SinkName

__all__ = ["HIDDEN", "MetricsSink", "open_sink", "open_sinks", "shareable_config"]

#: What a value that may be a secret reads as in a tracking tool's copy of the config.
HIDDEN = "<hidden>"

# Keys whose values may be secrets: a command agent's ``env`` (its values are the user's, API
# keys among them) and anything named like a credential. The run's own record in its store
# keeps them; a tracking tool may be a hosted service that the whole team (or the public) reads.
_SECRET_KEY = re.compile(r"(^|_)(env|token|key|secret|password|credentials?)$", re.IGNORECASE)


class MetricsSink(Protocol):
    """Where a step's metrics go besides the JSONL file.

    ``write`` gets the step and its flat ``{name: value}`` scalars, NaN and infinities
    included (each sink leaves out what its library cannot show); ``close`` ends the sink's
    run, ``failed`` when the fulmen run ended with an error.
    """

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` at ``step``."""
        ...

    def close(self, *, failed: bool = False) -> None:
        """Flush and end the sink's run."""
        ...


def open_sink(
    name: SinkName,
    config: MetricsConfig,
    *,
    run_dir: Path,
    run_id: str,
    run_config: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> MetricsSink:
    """Open sink ``name`` for run ``run_id``; raise ``ConfigError`` when it cannot start.

    A sink that cannot start (W&B not logged in, an MLflow server that does not answer) stops
    the run before it trains, with the library's own message, rather than training unlogged.
    """
    try:
        if name == "tensorboard":
            from fulmen.trainer.sinks.tensorboard_sink import TensorBoardSink

            return TensorBoardSink(run_dir / "tensorboard")
        if name == "wandb":
            from fulmen.trainer.sinks.config import WandbSettings
            from fulmen.trainer.sinks.wandb_sink import WandbSink

            settings = config.wandb or WandbSettings()
            return WandbSink(
                settings, run_dir=run_dir, run_id=run_id, run_config=run_config, environ=environ
            )
        from fulmen.trainer.sinks.config import MlflowSettings
        from fulmen.trainer.sinks.mlflow_sink import MlflowSink

        mlflow = config.mlflow or MlflowSettings()
        return MlflowSink(mlflow, run_dir=run_dir, run_id=run_id, run_config=run_config)
    except ImportError as exc:
        raise ConfigError(f"metrics sink {name}: {exc} (pip install 'fulmen[{name}]')") from exc
    except Exception as exc:
        raise ConfigError(f"metrics sink {name} could not start: {exc}") from exc


def open_sinks(
    config: MetricsConfig,
    *,
    run_dir: Path,
    run_id: str,
    run_config: Mapping[str, Any],
    tensorboard: bool = False,
    environ: Mapping[str, str] | None = None,
) -> list[MetricsSink]:
    """Open every sink the config selects (``tensorboard`` adds the older ``tensorboard: true``).

    When one fails to start, the ones already open are closed before the error is raised.
    """
    sinks: list[MetricsSink] = []
    run_config = shareable_config(run_config)
    try:
        for name in config.selected(tensorboard=tensorboard):
            sinks.append(
                open_sink(
                    name,
                    config,
                    run_dir=run_dir,
                    run_id=run_id,
                    run_config=run_config,
                    environ=environ,
                )
            )
    except BaseException:
        for sink in sinks:
            sink.close(failed=True)
        raise
    return sinks


def shareable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``config`` with every value that may be a secret replaced by ``HIDDEN``.

    A key like ``env``, ``api_key``, ``token`` or ``password`` (at any depth) hides its whole
    value, set or not; the rest is kept as it is, so the tracking tool still shows every
    hyperparameter. Lists are walked too (``stages``).
    """
    return {key: _shareable(key, value) for key, value in config.items()}


def _shareable(key: str, value: Any) -> Any:
    if _SECRET_KEY.search(key) and value not in (None, {}, [], ""):
        return HIDDEN
    if isinstance(value, Mapping):
        return shareable_config(value)  # pyright: ignore[reportUnknownArgumentType]
    if isinstance(value, list):
        return [_shareable("", item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value
