"""The APO custom-algorithm scripts of 0.x v0.3.0 (``examples/apo/apo_custom_algorithm.py``
and ``apo_custom_algorithm_trainer.py``).

``apo_algorithm`` tries three prompts: it publishes each as ``main_prompt``, enqueues a task,
polls ``wait_for_rollouts`` until it finished, logs the rollout's LLM spans and ranks the
prompts by the final reward. ``apo_rollout`` is the example's agent (a hosted model through
``AsyncOpenAI()``, judged by a second call); ``apo_rollout_llm`` the same after the guide's
change (the ``llm`` resource; the judge is a length rule here). ``algo_mode`` is the first
script's ``algo`` mode (a ``LightningStoreClient`` on ``agl store``); ``trainer_main`` the
second script's ``Trainer(n_workers=1, algorithm=...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fulmen.compat.agentlightning.algorithm import algo
from fulmen.compat.agentlightning.store import LightningStore
from openai import AsyncOpenAI

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning import Trainer, setup_logging

PROMPTS = [
    "You are a helpful assistant. {any_question}",
    "You are a knowledgeable AI. {any_question}",
    "You are a friendly chatbot. {any_question}",
]
QUESTION = "Explain why the sky appears blue."
results: list[tuple[str, float]] = []
llm_spans: list[str] = []


async def apo_algorithm(*, store: agl.LightningStore) -> None:
    prompt_and_rewards: list[tuple[str, float]] = []
    for prompt in PROMPTS:
        resources: agl.NamedResources = {
            "main_prompt": agl.PromptTemplate(template=prompt, engine="f-string")
        }
        await store.add_resources(resources)
        rollout = await store.enqueue_rollout(input=QUESTION, mode="train")
        for _ in range(600):
            rollouts = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.01)
            if rollouts:
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("Expected a completed rollout from the client, but got none.")
        if rollouts[0].status != "succeeded":
            raise RuntimeError(
                f"Rollout {rollout.rollout_id} did not succeed: {rollouts[0].status}"
            )
        spans = await store.query_spans(rollout.rollout_id)
        await log_llm_span(spans)
        final_reward = agl.find_final_reward(spans)
        assert final_reward is not None, "Expected a final reward from the client."
        prompt_and_rewards.append((prompt, final_reward))
    results.extend(prompt_and_rewards)


async def log_llm_span(spans: Sequence[agl.Span]) -> None:
    for span in spans:
        if "chat.completion" in span.name:
            llm_spans.append(span.name)


@agl.rollout
async def apo_rollout(task: str, prompt_template: agl.PromptTemplate) -> float:
    async with AsyncOpenAI() as client:  # the example's hosted model (closed here, for tests)
        result = await client.chat.completions.create(
            model="gpt-4.1-nano",
            messages=[{"role": "user", "content": prompt_template.format(any_question=task)}],
        )
    return float(len(result.choices[0].message.content or "") > 0)


@agl.rollout
async def apo_rollout_llm(task: str, prompt_template: agl.PromptTemplate, llm: agl.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused")
    try:
        result = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": prompt_template.format(any_question=task)}],
            max_tokens=8,
        )
    finally:
        await client.close()
    return min(1.0, len(result.choices[0].message.content or "") / 32)


async def algo_mode() -> None:
    store = agl.LightningStoreClient("http://localhost:4747")
    try:
        await apo_algorithm(store=store)
    finally:
        await store.close()


@algo
async def apo_algorithm_usable_in_trainer(*, store: LightningStore) -> None:
    return await apo_algorithm(store=store)


def trainer_main(agent: Any = apo_rollout, **kw: Any) -> None:
    setup_logging()
    trainer = Trainer(n_workers=1, algorithm=apo_algorithm_usable_in_trainer, **kw)
    trainer.fit(agent)
