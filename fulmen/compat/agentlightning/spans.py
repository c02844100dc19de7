"""Spans as 0.x code reads them back from the store, and the 0.x readers of reward spans.

A stored fulmen span gets 0.x's field names (``sequence_id`` for fulmen's per-rollout
``sequence``). Rewards are fulmen reward spans (``fulmen.reward``, one span per
``emit_reward``, possibly several named values with one primary); ``get_reward_value`` reads
the primary value, as 0.x read the first dimension; ``get_rewards_from_span`` every named
value. ``get_message_value`` and ``get_object_value`` read what ``agl.emit_message`` and
``agl.emit_object`` recorded (fulmen observations named ``message`` and ``object``).

fulmen records model calls at its gateway, as call records rather than spans. 0.x code reads
them among a rollout's spans (AgentOps named them ``openai.chat.completion``), so
``call_span`` shows a call record as a span of that name: ``gen_ai.*`` attributes with the
prompt and completion text, and the whole request and reply under ``fulmen.call.request`` /
``fulmen.call.response`` (``call_of_span`` reads them back).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fulmen.tracing import semconv
from fulmen.types import LLMCall
from fulmen.types import Span as FulmenSpan

__all__ = [
    "RewardDimension",
    "Span",
    "call_of_span",
    "call_span",
    "find_final_reward",
    "find_reward_spans",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
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


# The span names 0.x's tracer gave model calls, by the gateway's endpoint.
_CALL_NAMES = {
    "chat/completions": "openai.chat.completion",
    "completions": "openai.completion",
    "responses": "openai.responses",
    "messages": "anthropic.messages",
}
_REQUEST = "fulmen.call.request"
_RESPONSE = "fulmen.call.response"
_ENDPOINT = "fulmen.call.endpoint"


def call_span(call: LLMCall) -> Span:
    """Return the gateway's record of one model call as a 0.x span (see the module docstring)."""
    digest = hashlib.sha256(call.call_id.encode()).hexdigest()
    attributes: dict[str, Any] = {
        "fulmen.call.id": call.call_id,
        _ENDPOINT: call.endpoint,
        _REQUEST: call.request,
        _RESPONSE: call.response,
        "gen_ai.request.model": call.request.get("model"),
        "gen_ai.response.model": call.model,
    }
    messages = call.request.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(message, dict):
            attributes[f"gen_ai.prompt.{index}.role"] = message.get("role")
            attributes[f"gen_ai.prompt.{index}.content"] = message.get("content")
    for choice in call.choices:
        attributes[f"gen_ai.completion.{choice.index}.role"] = "assistant"
        attributes[f"gen_ai.completion.{choice.index}.content"] = choice.text
    if call.agent_name is not None:
        attributes["agent.name"] = call.agent_name
    return Span(
        rollout_id=call.rollout_id or "",
        attempt_id=call.attempt_id or "",
        sequence_id=call.sequence,
        trace_id=digest[:32],
        span_id=digest[32:48],
        name=_CALL_NAMES.get(call.endpoint, f"fulmen.call.{call.endpoint}"),
        attributes=attributes,
        status={"status_code": "ERROR" if call.error else "OK"},
        start_time=call.started_at,
        end_time=call.started_at + call.latency_s if call.latency_s is not None else None,
    )


def call_of_span(span: Any) -> tuple[str, dict[str, Any], dict[str, Any] | None] | None:
    """Return ``(endpoint, request, response)`` of a span made by ``call_span``, else ``None``."""
    attributes: dict[str, Any] = dict(getattr(span, "attributes", None) or {})
    request = attributes.get(_REQUEST)
    if not isinstance(request, dict):
        return None
    response = attributes.get(_RESPONSE)
    endpoint = str(attributes.get(_ENDPOINT, "chat/completions"))
    return endpoint, request, response if isinstance(response, dict) else None  # pyright: ignore[reportUnknownVariableType]


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


class RewardDimension(BaseModel):
    """One named value of a reward span (0.x's reward dimension)."""

    name: str
    value: float


def get_rewards_from_span(span: Any) -> list[RewardDimension]:
    """Return every named value of a reward span, the primary first; ``[]`` for other spans."""
    if not is_reward_span(span):
        return []
    attributes: dict[str, Any] = dict(getattr(span, "attributes", None) or {})
    names = attributes.get(semconv.REWARD_NAMES)
    values = attributes.get(semconv.REWARD_VALUES)
    if not isinstance(names, list) or not isinstance(values, list):
        return []
    primary = attributes.get(semconv.REWARD_PRIMARY)
    pairs = [
        RewardDimension(name=str(n), value=float(v))
        for n, v in zip(names, values, strict=False)
        if isinstance(v, int | float)
    ]
    return sorted(pairs, key=lambda d: d.name != primary)


def _observation(span: Any, name: str) -> str | None:
    """Return the content of an observation span named ``name``, else ``None``."""
    if getattr(span, "name", None) != semconv.SPAN_OBSERVATION:
        return None
    attributes: dict[str, Any] = dict(getattr(span, "attributes", None) or {})
    if attributes.get(semconv.OPERATION_NAME) != name:
        return None
    content = attributes.get(semconv.OBSERVATION_CONTENT)
    return content if isinstance(content, str) else None


def get_message_value(span: Any) -> str | None:
    """Return the text ``agl.emit_message`` recorded in ``span``, or ``None`` for another span."""
    return _observation(span, "message")


def get_object_value(span: Any) -> Any:
    """Return the object ``agl.emit_object`` recorded in ``span``, or ``None`` for another span."""
    content = _observation(span, "object")
    return None if content is None else json.loads(content)


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
