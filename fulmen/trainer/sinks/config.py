"""``metrics:``: which tracking tools get the run's metrics besides ``RUN_DIR/metrics.jsonl``.

Each sink's library is an optional extra; a sink whose library is missing is refused when the
config is read, with the extra to install, not after the engine has started.
"""

from __future__ import annotations

import importlib.util
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "SINK_PACKAGES",
    "MetricsConfig",
    "MlflowSettings",
    "SinkName",
    "WandbSettings",
    "require_sink",
]

SinkName: TypeAlias = Literal["tensorboard", "wandb", "mlflow"]

#: Each sink's import name and the fulmen extra that installs it.
SINK_PACKAGES: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboardX", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}


def require_sink(name: str) -> None:
    """Raise ``ValueError`` naming the extra to install when sink ``name``'s library is missing.

    Only looks the package up (``importlib.util.find_spec``): importing wandb or MLflow takes
    seconds, which reading a config should not.
    """
    module, extra = SINK_PACKAGES[name]
    if importlib.util.find_spec(module) is None:
        raise ValueError(
            f"the {name} metrics sink needs the {module} package, which is not installed: "
            f"pip install 'fulmen[{extra}]'"
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WandbSettings(_Strict):
    """Where the Weights & Biases sink logs (``wandb.init``'s arguments).

    Attributes:
        project: the W&B project.
        entity: the W&B team or user (default: the logged-in user's default entity).
        mode: ``online``, ``offline`` (files under ``RUN_DIR/wandb``, uploaded later with
            ``wandb sync``) or ``disabled``; left out, wandb's own default (``WANDB_MODE``, else
            online).
        name: the run's display name (default: the run folder's name).
        group: groups runs in the W&B UI (a sweep's runs, say).
        tags: tags of the W&B run.
    """

    project: str = Field(default="fulmen", min_length=1)
    entity: str | None = Field(default=None, min_length=1)
    mode: Literal["online", "offline", "disabled"] | None = None
    name: str | None = Field(default=None, min_length=1)
    group: str | None = Field(default=None, min_length=1)
    tags: list[str] = Field(default_factory=list)


class MlflowSettings(_Strict):
    """Where the MLflow sink logs.

    Attributes:
        tracking_uri: an MLflow tracking server (``http://host:5000``), a database
            (``sqlite:///mlflow.db``, needs the full ``mlflow`` package) or a folder
            (``file:///path/mlruns``; MLflow 3 opens one only with
            ``MLFLOW_ALLOW_FILE_STORE=true``); left out, ``MLFLOW_TRACKING_URI`` or MLflow's
            default.
        experiment: the experiment the run is logged in (created when missing).
        run_name: the MLflow run's name (default: the run folder's name).
    """

    tracking_uri: str | None = Field(default=None, min_length=1)
    experiment: str = Field(default="fulmen", min_length=1)
    run_name: str | None = Field(default=None, min_length=1)


class MetricsConfig(_Strict):
    """Tracking tools that get every step's metrics too (``docs/runs.md``, "Metrics sinks").

    ``RUN_DIR/metrics.jsonl`` and the store's run record always get them; each sink named here
    also does, as scalars by step (non-finite values are left out), and wandb and MLflow get
    the run's config (W&B config, MLflow params).

    Attributes:
        sinks: any of ``tensorboard`` (event files under ``RUN_DIR/tensorboard``, extra
            ``tensorboard``), ``wandb`` (extra ``wandb``) and ``mlflow`` (extra ``mlflow``).
        wandb: the W&B project, entity, mode, ... (``WandbSettings``); only with ``wandb`` in
            ``sinks``.
        mlflow: the MLflow tracking URI and experiment (``MlflowSettings``); only with
            ``mlflow`` in ``sinks``.
    """

    sinks: list[SinkName] = Field(default_factory=list)
    wandb: WandbSettings | None = None
    mlflow: MlflowSettings | None = None

    @model_validator(mode="after")
    def _sinks_usable(self) -> MetricsConfig:
        if len(set(self.sinks)) != len(self.sinks):
            raise ValueError(f"metrics.sinks names a sink twice: {self.sinks}")
        for section in ("wandb", "mlflow"):
            if getattr(self, section) is not None and section not in self.sinks:
                raise ValueError(
                    f"metrics.{section} has no effect unless metrics.sinks names {section}"
                )
        for name in self.sinks:
            require_sink(name)
        return self

    def selected(self, *, tensorboard: bool = False) -> list[SinkName]:
        """Return the sinks to open: ``sinks``, and ``tensorboard`` for ``tensorboard: true``."""
        if tensorboard and "tensorboard" not in self.sinks:
            return ["tensorboard", *self.sinks]
        return list(self.sinks)
