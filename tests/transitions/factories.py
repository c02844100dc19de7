"""Builders of call records and spans as the gateway and the emitters write them."""

from __future__ import annotations

from typing import Any

from fulmen.tracing import semconv
from fulmen.types import LLMCall, LLMChoice, Span


def call(
    seq: int,
    prompt: list[int],
    completion: list[int],
    *,
    logprobs: list[float] | None = None,
    response_id: str | None = None,
    token_level: bool = True,
    finish_reason: str = "stop",
    messages: list[dict[str, Any]] | None = None,
    reply: str = "ok",
    policy_version: str | None = None,
    rollout_id: str = "r1",
) -> LLMCall:
    lps = logprobs if logprobs is not None else [-0.5 - 0.01 * i for i in range(len(completion))]
    return LLMCall(
        call_id=f"{rollout_id}-call-{seq}",
        rollout_id=rollout_id,
        attempt_id=f"{rollout_id}-a1",
        request={"model": "m", "messages": messages or [{"role": "user", "content": "hi"}]},
        response={
            "id": response_id or f"resp-{rollout_id}-{seq}",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}],
        },
        prompt_token_ids=prompt if token_level else None,
        choices=[
            LLMChoice(
                token_ids=completion if token_level else None,
                logprobs=lps if token_level else None,
                finish_reason=finish_reason,
                text=reply,
            )
        ],
        is_token_level=token_level,
        response_id=response_id or f"resp-{rollout_id}-{seq}",
        policy_version=policy_version,
        started_at=float(seq),
        sequence=seq,
    )


def _span(seq: int, name: str, attributes: dict[str, Any], rollout_id: str = "r1") -> Span:
    return Span(
        rollout_id=rollout_id,
        attempt_id=f"{rollout_id}-a1",
        trace_id="t" * 32,
        span_id=f"s{seq:015d}",
        name=name,
        attributes=attributes,
        start_time=float(seq),
        end_time=float(seq),
        sequence=seq,
    )


def reward_span(
    seq: int,
    value: float,
    *,
    source: str = "emit",
    response_id: str | None = None,
    agent: str | None = None,
    rollout_id: str = "r1",
) -> Span:
    attributes: dict[str, Any] = {
        semconv.REWARD_NAMES: [semconv.DEFAULT_REWARD_NAME],
        semconv.REWARD_VALUES: [value],
        semconv.REWARD_PRIMARY: semconv.DEFAULT_REWARD_NAME,
        semconv.REWARD_SOURCE: source,
    }
    if response_id is not None:
        attributes[semconv.RESPONSE_ID] = response_id
    if agent is not None:
        attributes[semconv.AGENT_NAME] = agent
    return _span(seq, semconv.SPAN_REWARD, attributes, rollout_id)


def agent_span(seq: int, agent: str, response_id: str, rollout_id: str = "r1") -> Span:
    """A client span of an instrumented LLM call, stamped with the agent and the response id."""
    attributes = {semconv.AGENT_NAME: agent, semconv.RESPONSE_ID: response_id}
    return _span(seq, "ChatCompletion", attributes, rollout_id)
