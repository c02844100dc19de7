"""The toy task's agent written in Agent Lightning 0.x style, in every form 0.x offered.

Only the import differs from 0.x code: ``import fulmen.compat.agentlightning as agl``. The
reward is the toy's (``examples/toy``): the share of the token budget spent on the letter ``a``.
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI, OpenAI

import fulmen.compat.agentlightning as agl

MAX_TOKENS = 8
TOY_PROMPT = agl.PromptTemplate(template="{prompt}", engine="f-string")


def score(text: str) -> float:
    return min(1.0, text.count("a") / MAX_TOKENS)


class ToyLitAgent(agl.LitAgent[dict[str, Any]]):
    """Class form, async, two resources (the LLM and a prompt), emitted reward and objects."""

    async def training_rollout_async(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> float | None:
        llm: agl.LLM = resources["main_llm"]
        prompt: agl.PromptTemplate = resources["prompt_template"]
        assert isinstance(rollout, agl.AttemptedRollout)
        client = AsyncOpenAI(
            base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            api_key=llm.api_key or "none",
        )
        try:
            reply = await client.chat.completions.create(
                model=llm.model,
                messages=[{"role": "user", "content": prompt.format(**task)}],
                max_tokens=MAX_TOKENS,
            )
        finally:
            await client.close()
        text = reply.choices[0].message.content or ""
        agl.emit_object({"answer": text, "mode": rollout.mode})
        agl.emit_message(f"answered {len(text)} characters")
        agl.emit_reward(score(text))
        return None


class ToySyncLitAgent(agl.LitAgent[dict[str, Any]]):
    """Class form, sync, one ``rollout`` for both modes, returning its reward."""

    def rollout(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> float:
        llm = resources["main_llm"]
        assert isinstance(rollout, agl.AttemptedRollout)
        client = OpenAI(
            base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            api_key=llm.api_key or "none",
        )
        try:
            reply = client.chat.completions.create(
                model=llm.model,
                messages=[{"role": "user", "content": task["prompt"]}],
                max_tokens=MAX_TOKENS,
            )
        finally:
            client.close()
        return score(reply.choices[0].message.content or "")


@agl.rollout
def toy_sync_function(task: dict[str, Any], llm: agl.LLM) -> float:
    """Decorator form, sync: ``llm.endpoint`` is already this attempt's URL."""
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none")
    try:
        reply = client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": task["prompt"]}],
            max_tokens=MAX_TOKENS,
        )
    finally:
        client.close()
    return score(reply.choices[0].message.content or "")


@agl.rollout
async def toy_async_function(
    task: dict[str, Any], prompt_template: agl.PromptTemplate, llm: agl.LLM, rollout: agl.Rollout
) -> None:
    """Decorator form, async, LLM and prompt, reward emitted with the ``@reward`` decorator."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none")
    try:
        reply = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": prompt_template.format(**task)}],
            max_tokens=MAX_TOKENS,
        )
    finally:
        await client.close()
    agl.emit_object({"rollout": rollout.rollout_id})
    _graded(reply.choices[0].message.content or "")


@agl.reward
def _graded(text: str) -> float:
    return score(text)
