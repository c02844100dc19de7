"""The rules of runs, their metrics and model versions, shared by every backend.

The memory store and the SQL store keep runs differently but decide the same way: what a
resumed run keeps, what a status change does to ``ended_at``, when a repeated record is a
no-op and when it is a ``Conflict``, and where a page of metrics ends. Arguments that arrive
as plain values (a status, an end time, paging numbers) are checked here too, so an in-process
store refuses what the HTTP service refuses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any, Final

from pydantic import Field, TypeAdapter, ValidationError

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.types import UNSET, ModelVersion, Page, Run, RunMetrics, RunStatus, Unset
from fulmen.types.limits import FiniteFloat, Id, Int64

__all__ = [
    "MAX_METRICS_LIMIT",
    "MAX_RUNS_LIMIT",
    "check_run_id",
    "check_run_paging",
    "check_run_update",
    "conflicting_metrics",
    "conflicting_version",
    "missing_run",
    "page_run_metrics",
    "resumed_run",
    "started_run",
    "store_time",
    "updated_run",
]

MAX_RUNS_LIMIT: Final = 1000
MAX_METRICS_LIMIT: Final = 10_000

_RULES: Final[dict[str, TypeAdapter[Any]]] = {
    "run_id": TypeAdapter(Id),
    "status": TypeAdapter(RunStatus),
    "ended_at": TypeAdapter(FiniteFloat | None),
    "after_step": TypeAdapter(Int64 | None),
    "offset": TypeAdapter(Annotated[Int64, Field(ge=0)]),
}


def _check(name: str, value: Any) -> Any:
    try:
        return _RULES[name].validate_python(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        detail = [{"loc": [name, *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in errors]
        message = f"invalid argument {name}: {errors[0]['msg']}"
        raise InvalidRequest(message, detail=detail) from None


def store_time() -> float:
    """Return the store's clock as Unix seconds (``updated_at``, ``created_at``)."""
    return time.time()


def missing_run(run_id: str) -> NotFound:
    """Return the error for a run the store does not hold."""
    return NotFound(f"run {run_id!r} does not exist", detail={"run_id": run_id})


def check_run_id(run_id: str | None) -> None:
    """Refuse a run id that is not an ``Id`` (``None`` passes: no run named)."""
    if run_id is not None:
        _check("run_id", run_id)


def check_run_update(
    run_id: str, status: RunStatus | Unset, ended_at: float | Unset | None
) -> tuple[RunStatus | Unset, float | Unset | None]:
    """Validate ``Store.update_run``'s arguments; returns the status as a ``RunStatus``."""
    _check("run_id", run_id)
    if status is not UNSET:
        status = _check("status", status)
    if ended_at is not UNSET:
        ended_at = _check("ended_at", ended_at)
    return status, ended_at


def check_run_paging(
    *,
    limit: int,
    maximum: int,
    offset: int | None = None,
    after_step: int | None = None,
) -> None:
    """Refuse a ``limit`` outside ``1..maximum``, a negative ``offset`` or an out-of-range step."""
    if not 1 <= limit <= maximum:
        raise InvalidRequest(f"limit must be from 1 to {maximum}, got {limit}")
    if offset is not None:
        _check("offset", offset)
    _check("after_step", after_step)


def started_run(run: Run, now: float) -> Run:
    """Return a new run as the store records it: ``running``, stamped ``now``."""
    return run.model_copy(update={"status": RunStatus.RUNNING, "ended_at": None, "updated_at": now})


def resumed_run(stored: Run, request: Run, now: float) -> Run:
    """Return ``stored`` started again by ``request``: its first ``started_at`` is kept."""
    return started_run(request, now).model_copy(update={"started_at": stored.started_at})


def updated_run(
    run: Run, status: RunStatus | Unset, ended_at: float | Unset | None, now: float
) -> Run:
    """Apply a status and end-time change (see ``Store.update_run``)."""
    update: dict[str, Any] = {"updated_at": now}
    if status is not UNSET:
        update["status"] = status
        if status is RunStatus.RUNNING:
            update["ended_at"] = None
        elif ended_at is UNSET and run.ended_at is None:
            update["ended_at"] = now
    if ended_at is not UNSET:
        update["ended_at"] = ended_at
    return run.model_copy(update=update)


def conflicting_metrics(stored: RunMetrics) -> Conflict:
    """Return the error for a metrics record whose key is stored with other values."""
    key = {"run_id": stored.run_id, "step": stored.step, "time": stored.time}
    return Conflict(
        f"run {stored.run_id!r} already has a metrics record at step {stored.step}, "
        f"time {stored.time} with other values",
        detail=key,
    )


def conflicting_version(stored: ModelVersion) -> Conflict:
    """Return the error for a model version whose number is stored with other content."""
    return Conflict(
        f"run {stored.run_id!r} already has model version {stored.version} with other content",
        detail={"run_id": stored.run_id, "version": stored.version},
    )


def page_run_metrics(rows: Sequence[RunMetrics], limit: int) -> Page[RunMetrics]:
    """Page a run's metrics without splitting a step.

    ``rows`` are the records past the cursor, sorted by step then time; at most ``limit`` of
    them are taken, plus the rest of the last step's records when the limit falls inside it.
    """
    if len(rows) <= limit:
        return Page(items=list(rows), next_cursor=None)
    last_step = rows[limit - 1].step
    end = limit
    while end < len(rows) and rows[end].step == last_step:
        end += 1
    return Page(items=list(rows[:end]), next_cursor=last_step if end < len(rows) else None)
