"""Automatic intermediate rewards (AIR): per-call signals the records already hold.

The gateway's call records and the runner's spans show, without any help from the agent, when
a step went wrong. Each signal is a named reward of the call, ``1.0`` when it fired:

================== =========================================================================
``tool_error``     a tool this call asked for failed: a later call's ``tool`` message that
                   answers one of its tool calls starts with "error" or holds a traceback, or
                   an exception span was recorded between this call and the next
``malformed_tool`` the call's reply holds a tool call whose arguments are not a JSON object,
                   or stopped for tool calls without any
``truncated``      the reply was cut by ``max_tokens`` (finish reason ``length``)
``repeated``       the call's request is one the rollout already sent, verbatim
``model_error``    the model call failed (an error reply, a timeout)
================== =========================================================================

They are always computed and shown (the dashboard's reward breakdown, ``fulmen rescore``);
they change training only through ``transitions.air`` weights (``AIRConfig``): call ``k``'s
credited reward becomes ``r_k + Σ_s w_s x_{k,s}`` and the rollout's reward
``R + Σ_k Σ_s w_s x_{k,s}`` (``docs/rewards.md``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fulmen.tracing import semconv
from fulmen.types import LLMCall, Span

__all__ = ["AIR_SIGNALS", "AIRConfig", "AIRSignal", "call_signals"]

AIRSignal = Literal["tool_error", "malformed_tool", "truncated", "repeated", "model_error"]
AIR_SIGNALS: tuple[AIRSignal, ...] = (
    "tool_error",
    "malformed_tool",
    "truncated",
    "repeated",
    "model_error",
)
_UNCOMPARED = frozenset({"stream", "stream_options", "seed", "metadata", "user"})


class AIRConfig(BaseModel):
    """How much each automatic signal adds to a call's reward (``transitions.air``).

    Attributes:
        weights: signal name → weight; a fired signal adds its weight to the call's credited
            reward and to the rollout's reward (negative for a penalty, e.g.
            ``{truncated: -0.2, repeated: -0.1}``). Empty (default): the signals are shown,
            never trained on.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: dict[AIRSignal, float] = Field(default_factory=dict)

    @field_validator("weights")
    @classmethod
    def _finite(cls, weights: dict[AIRSignal, float]) -> dict[AIRSignal, float]:
        for name, value in weights.items():
            if value != value or abs(value) == float("inf"):
                raise ValueError(f"air weight {name!r} must be finite, got {value!r}")
        return weights

    def shaping(self, signals: Mapping[str, float]) -> float:
        """Return ``Σ_s w_s x_s`` for one call's fired signals."""
        return sum(self.weights.get(name, 0.0) * value for name, value in signals.items())  # type: ignore[call-overload]


def call_signals(calls: Sequence[LLMCall], spans: Sequence[Span]) -> list[dict[str, float]]:
    """Return the fired signals of each call (in the order given: store order), by name."""
    out: list[dict[str, float]] = [{} for _ in calls]
    seen: set[str] = set()
    exceptions = sorted(s.sequence for s in spans if s.name == semconv.SPAN_EXCEPTION)
    for k, call in enumerate(calls):
        fired = out[k]
        choice = call.choices[0] if call.choices else None
        if call.error is not None:
            fired["model_error"] = 1.0
        if choice is not None and choice.finish_reason == "length":
            fired["truncated"] = 1.0
        key = _request_key(call.request)
        if key in seen:
            fired["repeated"] = 1.0
        seen.add(key)
        tool_calls = _tool_calls(call.response)
        if _is_malformed(tool_calls, choice.finish_reason if choice else None):
            fired["malformed_tool"] = 1.0
        ids = {tc.get("id") for tc in tool_calls if isinstance(tc.get("id"), str)}
        upper = calls[k + 1].sequence if k + 1 < len(calls) else None
        answered_error = bool(ids) and any(
            _failed_results(later.request, ids) for later in calls[k + 1 :]
        )
        raised = any(call.sequence < e and (upper is None or e < upper) for e in exceptions)
        if answered_error or raised:
            fired["tool_error"] = 1.0
    return out


def _request_key(request: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in request.items() if k not in _UNCOMPARED}
    return json.dumps(kept, sort_keys=True, default=str)


def _tool_calls(response: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Return the tool calls of a chat reply's first choice (other APIs' replies: none)."""
    if not response:
        return []
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    message = choices[0].get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _is_malformed(tool_calls: list[dict[str, Any]], finish_reason: str | None) -> bool:
    if finish_reason == "tool_calls" and not tool_calls:
        return True
    for call in tool_calls:
        function = call.get("function")
        arguments = function.get("arguments") if isinstance(function, dict) else None
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else None
        except ValueError:
            return True
        if not isinstance(parsed, dict):
            return True
    return False


def _failed_results(request: Mapping[str, Any], ids: set[Any]) -> bool:
    """Whether ``request`` answers one of ``ids`` with a tool message that reports a failure."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        return False
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        if message.get("tool_call_id") not in ids:
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content.strip() if isinstance(content, str) else ""
        if text.lower().startswith("error") or "Traceback (most recent call last)" in text:
            return True
    return False
