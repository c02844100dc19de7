"""Conversions between the store's pydantic models and SQL rows.

JSON goes through ``pydantic_core`` (Rust, like orjson, and it also round-trips integers wider
than 64 bits, which ``JsonValue`` allows). Rows come from the tables in ``schema``.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json, to_json
from sqlalchemy.engine import Row

from fulmen.types import (
    Attempt,
    AttemptStatus,
    LLMCall,
    Mode,
    Resources,
    Rollout,
    RolloutConfig,
    RolloutStatus,
    Span,
    Worker,
)
from fulmen.types.limits import MAX_ID_LENGTH

__all__ = [
    "attempt_from_row",
    "attempt_values",
    "call_values",
    "dumps",
    "loads",
    "resources_from_row",
    "rollout_from_row",
    "span_values",
    "worker_from_row",
]


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return to_json(value).decode()


def loads(text: str) -> Any:
    """Parse JSON text."""
    return from_json(text)


def rollout_from_row(row: Row[Any]) -> Rollout:
    """Build a ``Rollout`` from a ``rollouts`` row."""
    m = row._mapping
    return Rollout(
        rollout_id=m["rollout_id"],
        input=loads(m["input_json"]),
        mode=Mode(m["mode"]),
        task_id=m["task_id"],
        resources_version=m["resources_version"],
        status=RolloutStatus(m["status"]),
        config=RolloutConfig.model_validate_json(m["config_json"]),
        metadata=loads(m["metadata_json"]),
        position=m["position"],
        attempt_count=m["attempt_count"],
        error=m["error"],
        enqueued_at=m["enqueued_at"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
    )


def attempt_values(attempt: Attempt) -> dict[str, Any]:
    """Column values of an ``attempts`` row."""
    return {
        "attempt_id": attempt.attempt_id,
        "rollout_id": attempt.rollout_id,
        "number": attempt.number,
        "worker_id": attempt.worker_id,
        "status": attempt.status.value,
        "error": attempt.error,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "last_heartbeat_at": attempt.last_heartbeat_at,
        "late_status": attempt.late_status.value if attempt.late_status else None,
        "late_error": attempt.late_error,
    }


def attempt_from_row(row: Row[Any]) -> Attempt:
    """Build an ``Attempt`` from an ``attempts`` row."""
    m = row._mapping
    late = m["late_status"]
    return Attempt(
        attempt_id=m["attempt_id"],
        rollout_id=m["rollout_id"],
        number=m["number"],
        worker_id=m["worker_id"],
        status=AttemptStatus(m["status"]),
        error=m["error"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        last_heartbeat_at=m["last_heartbeat_at"],
        late_status=AttemptStatus(late) if late is not None else None,
        late_error=m["late_error"],
    )


def span_values(span: Span) -> dict[str, Any]:
    """Column values of a ``spans`` row; ``body`` is the whole stored span."""
    return {
        "attempt_id": span.attempt_id,
        "span_id": span.span_id,
        "rollout_id": span.rollout_id,
        "sequence": span.sequence,
        "trace_id": span.trace_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "start_time": span.start_time,
        "end_time": span.end_time,
        "body": span.model_dump_json(),
    }


def call_values(call: LLMCall) -> dict[str, Any]:
    """Column values of an ``llm_calls`` row; ``body`` is the whole stored record."""
    return {
        "call_id": call.call_id,
        "rollout_id": call.rollout_id,
        "attempt_id": call.attempt_id,
        "sequence": call.sequence,
        "model": call.model,
        "started_at": call.started_at,
        "body": call.model_dump_json(),
        "response_id": _nameable_response_id(call.response_id),
    }


def _nameable_response_id(response_id: str | None) -> str | None:
    """Return the response id if a reward can name it (a valid ``Id``), else ``None``."""
    if response_id is None or len(response_id) > MAX_ID_LENGTH or "\x00" in response_id:
        return None
    return response_id or None


def resources_from_row(row: Row[Any]) -> Resources:
    """Build a ``Resources`` snapshot from a ``resources`` row."""
    return Resources.model_validate_json(row._mapping["body"])


def worker_from_row(row: Row[Any]) -> Worker:
    """Build a ``Worker`` from a ``workers`` row."""
    m = row._mapping
    return Worker(
        worker_id=m["worker_id"],
        last_heartbeat_at=m["last_heartbeat_at"],
        running_attempt_ids=loads(m["running_json"]),
        metadata=loads(m["metadata_json"]),
    )
