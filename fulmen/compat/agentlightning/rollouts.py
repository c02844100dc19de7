"""The 0.x data model (rollouts, attempts, their statuses and retry config) over fulmen's.

0.x and fulmen store the same things under different names and with a slightly different
lifecycle. The models here have 0.x's field names; the functions translate in both directions:

=====================  ============================================================
0.x                    fulmen
=====================  ============================================================
``queuing``            ``queuing`` with no attempt yet
``requeuing``          ``queuing`` after an attempt (a retry waits for its claim)
``preparing``          ``running`` whose attempt has recorded no span yet
``running``            ``running``
``unresponsive``       attempt ``lost`` (final in fulmen: it does not come back)
``resources_id``       the resources ``version``, as a string (``"3"``)
``start_time``         ``enqueued_at`` (rollout) / ``started_at`` (attempt), epoch seconds
``sequence_id``        the attempt ``number``
``retry_condition``    ``retry_on`` (``unresponsive`` is ``lost``)
``unresponsive_sec…``  ``heartbeat_timeout_s`` (the runner's heartbeat, not spans)
=====================  ============================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, SupportsIndex, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field

from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.types import Attempt as FulmenAttempt
from fulmen.types import AttemptStatus as FulmenAttemptStatus
from fulmen.types import Mode
from fulmen.types import Rollout as FulmenRollout
from fulmen.types import RolloutConfig as FulmenRolloutConfig
from fulmen.types import RolloutStatus as FulmenRolloutStatus

__all__ = [
    "Attempt",
    "AttemptStatus",
    "AttemptedRollout",
    "Dataset",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutRawResult",
    "RolloutStatus",
    "TaskInput",
    "attempt_from_fulmen",
    "attempt_status_from_fulmen",
    "config_from_fulmen",
    "config_to_fulmen",
    "mode_to_fulmen",
    "rollout_from_fulmen",
    "rollout_status_from_fulmen",
    "rollout_statuses_to_fulmen",
]

T_co = TypeVar("T_co", covariant=True)

RolloutStatus = Literal[
    "queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"
]
# ``cancelled`` and ``released`` are fulmen's: an attempt of a cancelled rollout, and one a
# runner handed back unfinished on shutdown (its rollout is queued again, uncounted).
AttemptStatus = Literal[
    "preparing", "running", "failed", "succeeded", "unresponsive", "timeout", "cancelled",
    "released",
]  # fmt: skip
RolloutMode = Literal["train", "val", "test"]
TaskInput = Any
# What a 0.x rollout method may return: fulmen takes a reward (or ``None`` with emitted
# rewards); returning spans is refused by the runner bridge.
RolloutRawResult = float | None | list[Any]


class Dataset(Protocol[T_co]):
    """Anything indexable with a length (a list works), as 0.x's ``Dataset``."""

    def __getitem__(self, index: SupportsIndex, /) -> T_co: ...

    def __len__(self) -> int: ...


class RolloutConfig(BaseModel):
    """Retries and timeouts of a rollout, with 0.x's names (see the module table).

    Attributes:
        timeout_seconds: wall-clock limit of one attempt; ``None`` for none.
        unresponsive_seconds: an attempt not heard from for this long is ``unresponsive``
            (fulmen: ``lost``, judged by the runner's heartbeat); ``None`` keeps fulmen's 60 s,
            since fulmen always watches its runners.
        max_attempts: attempts in all, the first included.
        retry_condition: the attempt outcomes that start another attempt while attempts remain.
    """

    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float | None = None
    unresponsive_seconds: float | None = None
    max_attempts: int = Field(default=1, ge=1)
    retry_condition: list[AttemptStatus] = Field(default_factory=list)


class Attempt(BaseModel):
    """One execution of a rollout, as 0.x shows it."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    attempt_id: str
    sequence_id: int
    start_time: float
    end_time: float | None = None
    status: AttemptStatus = "preparing"
    worker_id: str | None = None
    last_heartbeat_time: float | None = None
    metadata: dict[str, Any] | None = None


class Rollout(BaseModel):
    """A rollout (one task input with one resources version), as 0.x shows it."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    input: TaskInput
    start_time: float
    end_time: float | None = None
    mode: RolloutMode | None = None
    resources_id: str | None = None
    status: RolloutStatus = "queuing"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: dict[str, Any] | None = None


class AttemptedRollout(Rollout):
    """A rollout with the attempt now running it (what a claim and a rollout method get)."""

    attempt: Attempt


_RETRY = {
    "failed": FulmenAttemptStatus.FAILED,
    "timeout": FulmenAttemptStatus.TIMEOUT,
    "unresponsive": FulmenAttemptStatus.LOST,
}


def config_to_fulmen(config: RolloutConfig | None) -> FulmenRolloutConfig:
    """Translate a 0.x ``RolloutConfig``; ``NotSupported`` for a retry on a non-failure."""
    if config is None:
        # 0.x retries nothing by default; fulmen's own default retries timeouts and lost runs.
        return FulmenRolloutConfig(retry_on=frozenset())
    retry: set[FulmenAttemptStatus] = set()
    for status in config.retry_condition:
        if status not in _RETRY:
            raise NotSupported(
                f"retry_condition={status!r}",
                why="fulmen retries only attempts that failed, timed out or went unresponsive",
                instead="retry_condition among ['failed', 'timeout', 'unresponsive']",
            )
        retry.add(_RETRY[status])
    fields: dict[str, Any] = {
        "timeout_s": config.timeout_seconds,
        "max_attempts": config.max_attempts,
        "retry_on": frozenset(retry),
    }
    if config.unresponsive_seconds is not None:
        fields["heartbeat_timeout_s"] = config.unresponsive_seconds
    return FulmenRolloutConfig(**fields)


def config_from_fulmen(config: FulmenRolloutConfig) -> RolloutConfig:
    """Translate fulmen's ``RolloutConfig`` to 0.x's names."""
    back = {value: key for key, value in _RETRY.items()}
    return RolloutConfig(
        timeout_seconds=config.timeout_s,
        unresponsive_seconds=config.heartbeat_timeout_s,
        max_attempts=config.max_attempts,
        retry_condition=sorted(back[s] for s in config.retry_on if s in back),  # type: ignore[misc]
    )


def mode_to_fulmen(mode: str | None) -> Mode:
    """Translate a 0.x mode (``None`` is ``train``, the mode 0.x algorithms train on)."""
    if mode is None:
        return Mode.TRAIN
    if mode not in get_args(RolloutMode):
        raise NotSupported(
            f"mode={mode!r}", why="0.x modes are train, val and test", instead="one of those"
        )
    return Mode(mode)


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def rollout_status_from_fulmen(rollout: FulmenRollout, *, has_spans: bool = True) -> RolloutStatus:
    """Return the 0.x status of a fulmen rollout (``has_spans``: its attempt recorded any)."""
    if rollout.status is FulmenRolloutStatus.QUEUING:
        return "requeuing" if rollout.attempt_count > 0 else "queuing"
    if rollout.status is FulmenRolloutStatus.RUNNING:
        return "running" if has_spans else "preparing"
    return rollout.status.value  # type: ignore[return-value]


def rollout_statuses_to_fulmen(statuses: Sequence[str]) -> list[FulmenRolloutStatus]:
    """Return the fulmen statuses a 0.x status filter must read (the caller narrows them)."""
    out: set[FulmenRolloutStatus] = set()
    for status in statuses:
        if status not in get_args(RolloutStatus):
            raise NotSupported(
                f"status={status!r}",
                why=f"0.x rollout statuses are {list(get_args(RolloutStatus))}",
                instead="one of those",
            )
        if status in ("queuing", "requeuing"):
            out.add(FulmenRolloutStatus.QUEUING)
        elif status in ("preparing", "running"):
            out.add(FulmenRolloutStatus.RUNNING)
        else:
            out.add(FulmenRolloutStatus(status))
    return sorted(out)


def attempt_status_from_fulmen(attempt: FulmenAttempt, *, has_spans: bool = True) -> AttemptStatus:
    """Return the 0.x status of a fulmen attempt (``lost`` is ``unresponsive``)."""
    if attempt.status is FulmenAttemptStatus.RUNNING:
        return "running" if has_spans else "preparing"
    if attempt.status is FulmenAttemptStatus.LOST:
        return "unresponsive"
    return attempt.status.value  # type: ignore[return-value]


def attempt_from_fulmen(attempt: FulmenAttempt, *, has_spans: bool = True) -> Attempt:
    """Return a fulmen attempt with 0.x's field names."""
    return Attempt(
        rollout_id=attempt.rollout_id,
        attempt_id=attempt.attempt_id,
        sequence_id=attempt.number,
        start_time=attempt.started_at.timestamp(),
        end_time=_epoch(attempt.ended_at),
        status=attempt_status_from_fulmen(attempt, has_spans=has_spans),
        worker_id=attempt.worker_id,
        last_heartbeat_time=attempt.last_heartbeat_at.timestamp(),
        metadata={"error": attempt.error} if attempt.error else None,
    )


def rollout_from_fulmen(
    rollout: FulmenRollout, attempt: FulmenAttempt | None = None, *, has_spans: bool = True
) -> Rollout:
    """Return a fulmen rollout with 0.x's names (an ``AttemptedRollout`` given its attempt)."""
    mode: RolloutMode | None = (
        rollout.mode.value if rollout.mode.value in get_args(RolloutMode) else None  # type: ignore[assignment]
    )
    fields: dict[str, Any] = {
        "rollout_id": rollout.rollout_id,
        "input": rollout.input,
        "start_time": rollout.enqueued_at.timestamp(),
        "end_time": _epoch(rollout.ended_at),
        "mode": mode,
        "resources_id": (
            str(rollout.resources_version) if rollout.resources_version is not None else None
        ),
        "status": rollout_status_from_fulmen(rollout, has_spans=has_spans),
        "config": config_from_fulmen(rollout.config),
        "metadata": dict(rollout.metadata) or None,
    }
    if attempt is None:
        return Rollout(**fields)
    return AttemptedRollout(**fields, attempt=attempt_from_fulmen(attempt, has_spans=has_spans))
