"""Agents for the debugging tests: variants of the toy example's agents.

``changed_two_calls`` makes the same first call as ``toy_two_calls`` and a different second
one, so a replay of a ``toy_two_calls`` rollout must diverge at call #2.
``streaming_toy`` is ``toy_agent`` with a streamed reply, so replay serves server-sent events.
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

import fulmen

MAX_TOKENS = 8


def _score(text: str) -> float:
    return min(1.0, text.count("a") / MAX_TOKENS)


async def _ask(llm: fulmen.LLM, prompt: str) -> str:
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        response = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=MAX_TOKENS,
        )
    finally:
        await client.close()
    return response.choices[0].message.content or ""


@fulmen.rollout
async def changed_two_calls(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Like the toy ``toy_two_calls``, but the actor's request words its plan differently."""
    with fulmen.as_agent("planner"):
        plan = await _ask(llm, f"Plan how to answer: {task['prompt']}")
    with fulmen.as_agent("actor"):
        answer = await _ask(llm, f"{task['prompt']} Your plan was: {plan[:40]}")
    return _score(answer)


@fulmen.rollout
async def streaming_toy(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """The toy agent's one call, streamed; the reward is the same letter count."""
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        stream = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": task["prompt"]}],
            max_tokens=MAX_TOKENS,
            stream=True,
        )
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    finally:
        await client.close()
    return _score("".join(parts))


def strict_reward(rollout: Any) -> float:
    """A stricter toy reward for rescore: 1.0 only when every character is an ``a``."""
    text = rollout.final_text
    return 1.0 if text and set(text) == {"a"} else 0.0
