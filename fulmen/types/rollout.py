"""Rollouts, their attempts and the workers that run them: the lifecycle side of the data model.

A *rollout* is one task to run with one version of the resources. Claiming it creates an
*attempt*; a failed, timed-out or lost attempt may be retried as a new attempt while the rollout's
``RolloutConfig`` allows it. Every timestamp here is assigned by the store's clock, so clocks of
different machines are never compared.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from fulmen.types.limits import FiniteFloat, Id, Int32, JsonData, TaskId

__all__ = [
    "Attempt",
    "AttemptStatus",
    "Claim",
    "Mode",
    "Rollout",
    "RolloutConfig",
    "RolloutCreate",
    "RolloutStatus",
    "Worker",
]


class Mode(StrEnum):
    """What a rollout is for: training data, validation, a test run, or production traffic."""

    TRAIN = "train"
    VAL = "val"
    TEST = "test"
    PRODUCTION = "production"


class RolloutStatus(StrEnum):
    """Where a rollout is in its lifecycle; ``succeeded``, ``failed``, ``cancelled`` are final."""

    QUEUING = "queuing"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    """Where an attempt is; every status but ``running`` is final.

    ``timeout`` and ``lost`` are decided by the store's watchdog, never reported by a worker.
    ``cancelled`` follows a cancelled rollout. ``released`` is a worker handing the rollout back
    unfinished (on shutdown): the rollout is queued again and the attempt does not count
    against ``max_attempts``.
    """

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    LOST = "lost"
    CANCELLED = "cancelled"
    RELEASED = "released"


class RolloutConfig(BaseModel):
    """How a rollout is run and retried.

    Attributes:
        timeout_s: wall-clock limit of one attempt, from its claim; ``None`` means no limit.
        heartbeat_timeout_s: an attempt with no heartbeat for this long is ``lost``.
        max_attempts: how many attempts the rollout may have in total (1 = no retry).
        retry_on: which attempt outcomes start a new attempt while attempts remain.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: FiniteFloat | None = Field(default=None, gt=0)
    heartbeat_timeout_s: FiniteFloat = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=1, ge=1, le=100)
    retry_on: frozenset[AttemptStatus] = frozenset({AttemptStatus.TIMEOUT, AttemptStatus.LOST})

    @field_validator("retry_on")
    @classmethod
    def _only_failures(cls, value: frozenset[AttemptStatus]) -> frozenset[AttemptStatus]:
        allowed = {AttemptStatus.FAILED, AttemptStatus.TIMEOUT, AttemptStatus.LOST}
        bad = sorted(s.value for s in value - allowed)
        if bad:
            raise ValueError(f"retry_on may hold only failed, timeout, lost; got {bad}")
        return value


class RolloutCreate(BaseModel):
    """What a caller sends to enqueue a rollout.

    ``rollout_id`` may be chosen by the caller so a retried enqueue is not duplicated; when it is
    ``None`` the store picks one. ``resources_version`` ``None`` means the latest version at
    enqueue time.
    """

    model_config = ConfigDict(extra="forbid")

    input: JsonData
    mode: Mode = Mode.TRAIN
    rollout_id: Id | None = None
    task_id: TaskId | None = None
    resources_version: Int32 | None = Field(default=None, ge=1)
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: dict[str, JsonData] = Field(default_factory=dict)


class Rollout(BaseModel):
    """A rollout as stored.

    ``position`` is the store-assigned enqueue order (FIFO claims and pagination use it);
    ``attempt_count`` is how many attempts were created so far.
    """

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    input: JsonValue
    mode: Mode
    task_id: str | None = None
    resources_version: int | None = None
    status: RolloutStatus
    config: RolloutConfig
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    position: int
    attempt_count: int = 0
    error: str | None = None
    enqueued_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def is_terminal(self) -> bool:
        """True once the rollout can no longer change status."""
        return self.status in (
            RolloutStatus.SUCCEEDED,
            RolloutStatus.FAILED,
            RolloutStatus.CANCELLED,
        )


class Attempt(BaseModel):
    """One try at running a rollout, created by a claim.

    A report that arrives after the attempt is final (a worker that outlived its timeout, say) is
    kept in ``late_status``/``late_error`` and changes nothing else.
    """

    model_config = ConfigDict(extra="forbid")

    attempt_id: str
    rollout_id: str
    number: int
    worker_id: str
    status: AttemptStatus
    error: str | None = None
    started_at: datetime
    ended_at: datetime | None = None
    last_heartbeat_at: datetime
    late_status: AttemptStatus | None = None
    late_error: str | None = None

    @property
    def is_terminal(self) -> bool:
        """True once the attempt can no longer change status."""
        return self.status is not AttemptStatus.RUNNING


class Claim(BaseModel):
    """A claimed rollout with the attempt the claim created."""

    model_config = ConfigDict(extra="forbid")

    rollout: Rollout
    attempt: Attempt


class Worker(BaseModel):
    """A runner process as the store last heard of it."""

    model_config = ConfigDict(extra="forbid")

    worker_id: str
    last_heartbeat_at: datetime
    running_attempt_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
