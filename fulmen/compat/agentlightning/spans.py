"""Spans as 0.x code reads them back from the store, and the 0.x readers of reward spans.

A stored fulmen span gets 0.x's field names (``sequence_id`` for fulmen's per-rollout
``sequence``). Rewards are fulmen reward spans (``fulmen.reward``, one span per
``emit_reward``, possibly several named values with one primary); ``get_reward_value`` reads
the primary value, as 0.x read the first dimension.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fulmen.tracing import semconv
from fulmen.types import Span as FulmenSpan

__all__ = [
    "Span",
    "find_final_reward",
    "find_reward_spans",
    "get_reward_value",
    "is_reward_span",
    "span_from_fulmen",
]


class Span(BaseModel):
    """Return a stored span with 0.x's field names (times in epoch seconds)."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    attempt_id: str
    sequence_id: int
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    attributes: dict[str, Any] = Field(default_factory=dict)
    events: list[dict[str, Any]] = Field(default_factory=list)
    status: dict[str, Any] = Field(default_factory=dict)
    start_time: float | None = None
    end_time: float | None = None


def span_from_fulmen(span: FulmenSpan) -> Span:
    """Return a stored fulmen span with 0.x's field names."""
    return Span(
        rollout_id=span.rollout_id,
        attempt_id=span.attempt_id,
        sequence_id=span.sequence,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        name=span.name,
        attributes=dict(span.attributes),
        events=[e.model_dump() for e in span.events],
        status=span.status.model_dump(mode="json"),
        start_time=span.start_time,
        end_time=span.end_time,
    )


def is_reward_span(span: Any) -> bool:
    """Whether ``span`` (a 0.x ``Span`` or a fulmen one) holds a reward."""
    return getattr(span, "name", None) == semconv.SPAN_REWARD


def get_reward_value(span: Any) -> float | None:
    """Return the primary reward a reward span holds, or ``None`` for any other span."""
    if not is_reward_span(span):
        return None
    attributes: dict[str, Any] = dict(getattr(span, "attributes", None) or {})
    names = attributes.get(semconv.REWARD_NAMES)
    values = attributes.get(semconv.REWARD_VALUES)
    if not isinstance(names, list) or not isinstance(values, list) or not names:
        return None
    rewards = dict(zip(names, values, strict=False))
    primary = attributes.get(semconv.REWARD_PRIMARY, names[0])
    value = rewards.get(primary)
    return float(value) if isinstance(value, int | float) else None


def find_reward_spans(spans: list[Any]) -> list[Any]:
    """Return the reward spans among ``spans``, in their order."""
    return [s for s in spans if is_reward_span(s)]


def find_final_reward(spans: list[Any]) -> float | None:
    """Return the reward of the last reward span (``None`` when there is none), as 0.x."""
    for span in reversed(spans):
        value = get_reward_value(span)
        if value is not None:
            return value
    return None
