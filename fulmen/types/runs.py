"""Training runs and the model versions they publish: the experiment side of the data model.

A *run* is one ``fulmen train`` (or any training loop) recorded in the store: its config, the
host it runs on, its status and times. Its metrics are ``RunMetrics`` records, one per line of
the run's ``metrics.jsonl``; every adapter or full checkpoint it publishes is a
``ModelVersion`` with the step, path, validation scores and resources version serving it.
Several runs share one store, so a reader on another machine lists and follows them.

Times are Unix seconds (floats). ``Run.started_at``/``ended_at`` and ``RunMetrics.time`` are the
training host's clock (what ``metrics.jsonl`` holds); ``Run.updated_at`` and
``ModelVersion.created_at`` are assigned by the store's clock, and what a caller sends for them
is replaced.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fulmen.types.limits import FiniteFloat, Id, Int32, Int64, JsonData

__all__ = [
    "MAX_METRIC_TEXT",
    "MAX_METRIC_VALUES",
    "MetricName",
    "ModelKind",
    "ModelVersion",
    "Run",
    "RunMetrics",
    "RunStatus",
]

MAX_METRIC_VALUES: Final = 1024
"""The most named numbers one metrics record (or one model version's scores) may carry."""

MAX_METRIC_TEXT: Final = 64
"""The most text labels one metrics record may carry."""

_NO_NUL = "^[^\\u0000]*$"

MetricName: TypeAlias = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern=_NO_NUL)
]
"""The name of a metric, a label or a score: 1 to 256 characters, no NUL."""

_Name: TypeAlias = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=_NO_NUL)]
_Host: TypeAlias = Annotated[str, StringConstraints(max_length=256, pattern=_NO_NUL)]
_Label: TypeAlias = Annotated[str, StringConstraints(max_length=1024, pattern=_NO_NUL)]
_Path: TypeAlias = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=_NO_NUL)]
_Step: TypeAlias = Annotated[Int64, Field(ge=0)]


class RunStatus(StrEnum):
    """Where a run is: ``running`` until its trainer ends it as succeeded, failed or stopped.

    ``stopped`` is a run interrupted on purpose (Ctrl-C, a signal); ``failed`` one that raised.
    A run that is started again (resumed) is ``running`` once more.
    """

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


class ModelKind(StrEnum):
    """What a model version holds: a LoRA adapter or the full weights."""

    ADAPTER = "adapter"
    FULL = "full"


class Run(BaseModel):
    """One training run, as ``Store.start_run`` records it and ``Store.get_run`` returns it.

    Attributes:
        run_id: the caller's id; starting a run with an id the store holds resumes that run.
        name: what people call it (the run directory's name, say).
        config: the run's configuration as JSON (finite numbers only).
        status: see ``RunStatus``.
        host: the machine the trainer runs on.
        started_at: when the run was first started (training host's clock); kept on resume.
        ended_at: when it ended (``None`` while running).
        updated_at: the store's clock at the last change (set by the store).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: Id
    name: _Name
    config: dict[str, JsonData] = Field(default_factory=dict)
    status: RunStatus = RunStatus.RUNNING
    host: _Host = ""
    started_at: FiniteFloat
    ended_at: FiniteFloat | None = None
    updated_at: FiniteFloat = 0.0

    @property
    def is_final(self) -> bool:
        """Tell whether the run has ended (any status but ``running``)."""
        return self.status is not RunStatus.RUNNING


class RunMetrics(BaseModel):
    """One metrics record of a run: what one line of its ``metrics.jsonl`` holds.

    The store keeps one record per ``(run_id, step, time)``: posting it again is a no-op, and
    the same key with other values is a ``Conflict``. Several records may share a step (a
    training step and its validation).

    Attributes:
        run_id: the run it belongs to (the run must exist).
        step: the run's step (numbered across stages).
        time: when it was logged (training host's clock, Unix seconds).
        values: every finite number of the line (metrics and numeric labels such as the stage
            index); a metric that was NaN or infinite (``null`` in the file) is left out.
        text: the line's string labels (the stage's algorithm name, say).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: Id
    step: _Step
    time: FiniteFloat
    values: dict[MetricName, FiniteFloat] = Field(
        default_factory=dict, max_length=MAX_METRIC_VALUES
    )
    text: dict[MetricName, _Label] = Field(default_factory=dict, max_length=MAX_METRIC_TEXT)


class ModelVersion(BaseModel):
    """A model a run published: an adapter or a full checkpoint, with what it scored.

    Idempotent by ``(run_id, version)``: the same version again with the same content returns
    the stored one; with other content it is a ``Conflict``.

    Attributes:
        run_id: the run that published it (the run must exist).
        version: the run's number for it (1, 2, ...).
        step: the training step it was saved at (numbered across stages).
        kind: ``adapter`` or ``full``.
        path: where its files are (on the training host, or shared storage).
        scores: validation scores at that step (``val/reward_mean``, say); may be empty.
        resources_id / resources_version: the resources version that serves it, when one was
            published (``None`` before the first publish that names it).
        created_at: when the store recorded it (set by the store).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: Id
    version: Annotated[Int32, Field(ge=1)]
    step: _Step
    kind: ModelKind
    path: _Path
    scores: dict[MetricName, FiniteFloat] = Field(
        default_factory=dict, max_length=MAX_METRIC_VALUES
    )
    resources_id: Id | None = None
    resources_version: Annotated[Int32, Field(ge=1)] | None = None
    created_at: FiniteFloat = 0.0

    def same_content(self, other: ModelVersion) -> bool:
        """Tell whether ``other`` records the same model (``created_at`` aside)."""
        return self.model_dump(exclude={"created_at"}) == other.model_dump(exclude={"created_at"})
