"""A step without an update says whether its calls failed or the engine gave no token ids.

The call records are built by the gateway's own record builder from what the engine answered:
a 400 (a prompt over the context) or a text-only reply. Transition building counts the failed calls,
and the step's reason names them instead of blaming the engine.
"""

from __future__ import annotations

from typing import Any

from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.gateway.capture import Exchange, build_call
from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.types import LLMCall
from tests.transitions.factories import reward_span

REQUEST = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "long..."}]}
TOO_LONG = {
    "message": "This model's maximum context length is 32768 tokens. However, your prompt is "
    "45012 tokens long",
    "type": "BadRequestError",
    "param": "messages",
    "code": 400,
}
TEXT_ONLY = {
    "id": "chatcmpl-1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
}


def record(
    number: int, *, error: dict[str, Any] | None, response: dict[str, Any] | None
) -> LLMCall:
    created = build_call(
        Exchange(
            call_id=f"c{number}",
            rollout_id="r1",
            attempt_id="r1-a1",
            endpoint="/v1/chat/completions",
            request=REQUEST,
            response=response,
            upstream="http://127.0.0.1:8000/v1",
            is_stream=False,
            started_at=float(number),
            latency_s=0.1,
            error=error,
        )
    )
    return LLMCall(**created.model_dump(), sequence=number)


def step_metrics(calls: list[LLMCall]) -> dict[str, float]:
    """The counts a GRPO step logs for these calls (``transitions/*``, no transition built)."""
    trajectory = build_trajectory(
        rollout_id="r1",
        attempt_id="r1-a1",
        task_id="t",
        calls=calls,
        spans=[reward_span(99, 1.0, source="return")],
        options=TransitionOptions(),
    )
    assert trajectory.transitions == []
    counts = trajectory.diagnostics.model_dump()
    return {
        "rollouts/finished": 1.0,
        "transitions": 0.0,
        **{f"transitions/{k}": float(v) for k, v in counts.items()},
    }


def test_every_call_a_400_says_the_calls_failed_not_the_engine() -> None:
    metrics = step_metrics([record(i, error=TOO_LONG, response=None) for i in (1, 2, 3)])
    assert metrics["transitions/failed_calls"] == 3.0
    reason = no_update_reason(metrics, store_url="sqlite:///run/store.db")
    assert reason.startswith("every one of the 3 calls failed: the engine answered with an error")
    assert "fulmen rollouts show ROLLOUT_ID --store sqlite:///run/store.db" in reason
    assert "not a token-level engine" not in reason


def test_text_only_replies_blame_the_engine_and_failures_are_named_beside_them() -> None:
    text_only = step_metrics([record(1, error=None, response=TEXT_ONLY)])
    assert text_only["transitions/failed_calls"] == 0.0
    assert no_update_reason(text_only) == "1 of 1 calls had no token ids (not a token-level engine)"
    mixed = step_metrics(
        [record(1, error=None, response=TEXT_ONLY), record(2, error=TOO_LONG, response=None)]
    )
    reason = no_update_reason(mixed)
    assert reason.startswith(
        "1 of 2 calls had no token ids (not a token-level engine), and 1 failed"
    )


def test_rollouts_without_calls_or_reward_point_at_a_crash_not_only_the_url() -> None:
    # A command agent that exits before its first call: no calls, no reward, not failed.
    trajectory = build_trajectory(
        rollout_id="r1", attempt_id="r1-a1", task_id="t", calls=[], spans=[]
    )
    metrics = {
        "rollouts/finished": 2.0,
        "rollouts/failed": 0.0,
        "transitions": 0.0,
        "updated": 0.0,
        **{f"transitions/{k}": 2.0 * v for k, v in trajectory.diagnostics.model_dump().items()},
    }
    assert no_update_reason(metrics) == (
        "none of the 2 rollouts produced a reward or called the model: a command agent that "
        "exits before its first call (`fulmen dev CONFIG` shows its exit status and stderr), "
        "or an agent that returns None without calling llm.base_url"
    )


def test_a_non_finite_gradient_read_back_from_a_store_shows_no_none() -> None:
    # The store leaves non-finite values out, so the dashboard's reason had read "(None)".
    stored = {"skipped_nonfinite": 1.0, "rollouts/finished": 8, "updated": 0.0}
    reason = no_update_reason(stored)
    assert reason.startswith("the gradient norm was not finite, so the optimizer step")
    assert "(nan)" in no_update_reason({**stored, "grad_norm": float("nan")})
