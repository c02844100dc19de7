"""A toy task that proves the training gradient is right, for the random `tiny` model.

The agent asks the model to write the letter ``a``; the reward is the number of ``a``
characters in the answer divided by the token budget (capped at 1.0). A randomly initialised
model scores about 0.1; a correct policy-gradient update pushes it to 1.0 within a few CPU
minutes (the model learns to repeat a token that contains the letter).

The task's text reaches the model through a prompt resource named ``prompt`` (``TOY_PROMPT``,
which sends it unchanged, when the run publishes none), so ``fulmen ab`` can compare prompt
versions on it; ``examples/toy/worse_prompt.json`` is one the random model does worse with.

``toy_two_calls`` makes two calls per rollout: a *planner* whose output is ignored by the reward
and an *actor* that is rewarded. Training it with ``transitions.agents: [actor]`` trains only the
actor's calls.
"""

from __future__ import annotations

import ssl
from typing import Any

from openai import AsyncOpenAI, DefaultAsyncHttpxClient

import fulmen
from fulmen.types import PromptTemplate

TARGET = "a"
MAX_TOKENS = 8
TOY_PROMPT = PromptTemplate(template="{prompt}")
# A client made per rollout builds a TLS context (loading the CA certificates) unless it is
# given one: ~20 ms of CPU a rollout on a 2-core CI machine, more than the tiny model's answer
# costs. With one shared context a client costs ~0.1 ms.
TLS = ssl.create_default_context()


def score(text: str) -> float:
    """How many target letters ``text`` holds, per token of budget, capped at 1.0."""
    return min(1.0, text.count(TARGET) / MAX_TOKENS)


def train_tasks() -> list[dict[str, Any]]:
    """64 prompts that differ in wording (so groups differ), all asking for the letter."""
    return [{"id": f"t{i}", "prompt": f"Task {i}: write the letter {TARGET}."} for i in range(64)]


def val_tasks() -> list[dict[str, Any]]:
    """16 held-out prompts."""
    return [{"id": f"v{i}", "prompt": f"Check {i}: write the letter {TARGET}."} for i in range(16)]


async def _ask(llm: fulmen.LLM, prompt: str, template: PromptTemplate = TOY_PROMPT) -> str:
    messages: list[Any] = template.messages(prompt=prompt)
    client = AsyncOpenAI(
        base_url=llm.base_url,
        api_key=llm.api_key,
        http_client=DefaultAsyncHttpxClient(verify=TLS),
    )
    try:
        response = await client.chat.completions.create(
            model=llm.model,
            messages=messages,
            max_tokens=MAX_TOKENS,
        )
    finally:
        await client.close()
    return response.choices[0].message.content or ""


@fulmen.rollout
async def toy_agent(
    task: dict[str, Any], llm: fulmen.LLM, prompt: PromptTemplate = TOY_PROMPT
) -> float:
    """One call; reward = target letters in the answer per token of budget."""
    return score(await _ask(llm, task["prompt"], prompt))


@fulmen.rollout
async def toy_two_calls(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Two calls: a planner (not rewarded) and an actor (rewarded)."""
    with fulmen.as_agent("planner"):
        plan = await _ask(llm, f"Plan how to answer: {task['prompt']}")
    with fulmen.as_agent("actor"):
        answer = await _ask(llm, f"{task['prompt']} Plan: {plan[:40]}")
    return score(answer)
