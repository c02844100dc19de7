"""Automatic intermediate rewards: each signal on a hand-made rollout, and what weights do."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fulmen.tracing import semconv
from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.transitions.air import AIRConfig, call_signals
from fulmen.types import LLMCall

from .factories import _span, call, reward_span


def _tool_reply(record: LLMCall, arguments: str, call_id: str = "tc1") -> LLMCall:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "calc", "arguments": arguments},
            }
        ],
    }
    response: dict[str, Any] = {"id": record.response_id, "choices": [{"message": message}]}
    return record.model_copy(update={"response": response})


def _asking(record: LLMCall, messages: list[dict[str, Any]]) -> LLMCall:
    return record.model_copy(update={"request": {"model": "m", "messages": messages}})


def test_each_signal_fires_on_its_own_case() -> None:
    user = [{"role": "user", "content": "2+2?"}]
    first = _tool_reply(_asking(call(1, [1], [2]), user), '{"x": "2+2"}')
    failed = {"role": "tool", "tool_call_id": "tc1", "content": "Error: division by zero"}
    second = _asking(call(2, [1, 2, 3], [4], finish_reason="length"), [*user, failed])
    third = _asking(call(3, [1, 2, 3], [4]), [*user, failed])  # the same request again
    broken = _tool_reply(_asking(call(4, [5], [6]), [{"role": "user", "content": "x"}]), "{oops")
    error = call(5, [7], [8]).model_copy(update={"error": {"message": "timeout"}})
    signals = call_signals([first, second, third, broken, error], [])
    assert signals == [
        {"tool_error": 1.0},
        {"truncated": 1.0},
        {"repeated": 1.0},
        {"malformed_tool": 1.0},
        {"model_error": 1.0},
    ]


def test_an_exception_span_between_two_calls_marks_the_earlier_one() -> None:
    calls = [
        call(1, [1], [2]),
        call(3, [1, 2, 5], [6], messages=[{"role": "user", "content": "b"}]),
    ]
    exception = _span(2, semconv.SPAN_EXCEPTION, {semconv.EXCEPTION_TYPE: "ValueError"})
    assert call_signals(calls, [exception]) == [{"tool_error": 1.0}, {}]


def test_signals_are_counted_always_and_trained_only_with_weights() -> None:
    other = [{"role": "user", "content": "other"}]
    calls = [call(1, [1], [2], finish_reason="length"), call(2, [3], [4], messages=other)]
    spans = [reward_span(9, 1.0)]
    plain = build_trajectory(rollout_id="r1", calls=calls, spans=spans)
    assert [t.reward for t in plain.transitions] == [1.0, 1.0]
    assert plain.final_reward == 1.0 and plain.diagnostics.air_truncated == 1
    options = TransitionOptions(air={"weights": {"truncated": -0.25}})
    shaped = build_trajectory(rollout_id="r1", calls=calls, spans=spans, options=options)
    # The truncated call's own reward drops by 0.25; the rollout's reward by the same total.
    assert [t.reward for t in shaped.transitions] == [0.75, 1.0]
    assert [t.rollout_reward for t in shaped.transitions] == [0.75, 0.75]
    assert shaped.final_reward == 0.75


def test_weights_must_name_a_signal_and_be_finite() -> None:
    with pytest.raises(ValidationError):
        AIRConfig.model_validate({"weights": {"slow": -1.0}})
    with pytest.raises(ValidationError, match="finite"):
        AIRConfig.model_validate({"weights": {"repeated": float("nan")}})
