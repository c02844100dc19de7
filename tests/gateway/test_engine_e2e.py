"""End to end with the real built-in inference engine (tiny model on CPU) behind the gateway.

Also a training rollout's ``top_k``: an agent that sends ``top_k: 20`` in a training rollout
must get tokens sampled from, and logprobs recorded of, the whole distribution at the behaviour
temperature, the ones GRPO's trainer recomputes. A seeded call samples the same tokens whatever
else the engine runs, so a validation call with the same seed and no ``top_k`` is the reference.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

from fulmen.gateway import GatewayConfig, create_app
from fulmen.types import LLMCall, LLMResource, Mode, ResourcesCreate
from tests.gateway.conftest import Running, SpyStore, add_sampling, new_attempt
from tests.gateway.scripted_upstream import Script, serve_app
from tests.prefork import python

pytest.importorskip("torch")
launcher = pytest.importorskip("fulmen.engines.launcher")

pytestmark = pytest.mark.slow
MESSAGES = [{"role": "user", "content": "Count: one two three"}]


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    process = launcher.BuiltinLauncher("tiny", threads=1, python=python())
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def egw(engine: Any, store: SpyStore) -> AsyncIterator[Running]:
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, read_timeout_s=120)
    app = create_app(store, [engine.base_url], config=config)
    async with serve_app(app) as url:
        yield Running(url, app.state.gateway, store, Script())


async def test_engine_calls_are_token_level_and_streaming_matches(egw: Running) -> None:
    version = await add_sampling(egw.store, {"val": {"temperature": 0.0}})
    rollout_id, attempt_id = await new_attempt(egw.store, mode=Mode.VAL, resources_version=version)
    client = openai.AsyncOpenAI(base_url=egw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        whole = await client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=6, temperature=1.0
        )
        stream = await client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=6, temperature=1.0, stream=True
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert streamed == whole.choices[0].message.content
    first, second = await egw.calls(rollout_id)
    for call in (first, second):
        assert call.is_token_level and call.policy_version is not None
        (choice,) = call.choices
        assert choice.token_ids is not None and choice.logprobs is not None
        assert len(choice.token_ids) == call.usage["completion_tokens"] <= 6
        assert all(lp <= 0.0 for lp in choice.logprobs)
        assert len(call.prompt_token_ids or []) == call.usage["prompt_tokens"]
    # Greedy (the val override beat the agent's temperature=1.0): same tokens both ways.
    assert second.is_stream and not first.is_stream
    assert first.prompt_token_ids == second.prompt_token_ids
    assert first.choices[0].token_ids == second.choices[0].token_ids
    assert first.choices[0].logprobs == pytest.approx(second.choices[0].logprobs, abs=1e-4)


async def test_completion_on_token_ids_continues_a_chat_call(egw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(egw.store)
    client = openai.AsyncOpenAI(base_url=egw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        await client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)
        (chat,) = await egw.calls(rollout_id)
        prompt = (chat.prompt_token_ids or []) + (chat.choices[0].token_ids or [])
        out = await client.completions.create(model="tiny", prompt=prompt, max_tokens=4)
    assert out.choices[0].text is not None
    _, completion = await egw.calls(rollout_id)
    assert completion.endpoint == "completions" and completion.is_token_level
    assert completion.prompt_token_ids == prompt


async def seeded_call(gw: Running, mode: Mode, version: int, **fields: Any) -> LLMCall:
    """One seeded chat call in a new rollout of ``mode``; returns its record."""
    rollout_id, attempt_id = await new_attempt(gw.store, mode=mode, resources_version=version)
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        await client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=8,
            seed=7,
            logprobs=True,
            top_logprobs=20,
            extra_body=fields,
        )
    (record,) = await gw.calls(rollout_id)
    assert record.is_token_level
    return record


def top_mass(record: LLMCall) -> list[float]:
    """Per generated token, the probability mass of the 20 most likely tokens shown."""
    content = record.response["choices"][0]["logprobs"]["content"]
    return [sum(math.exp(t["logprob"]) for t in entry["top_logprobs"]) for entry in content]


async def test_an_agents_top_k_does_not_truncate_a_training_rollouts_distribution(
    egw: Running,
) -> None:
    llm = LLMResource(
        base_url="http://unused/v1",
        model="tiny",
        sampling={"train": {"temperature": 1.0, "top_p": 1.0}, "val": {"temperature": 1.0}},
        behaviour_modes=(Mode.TRAIN,),
    )
    resources = await egw.store.add_resources(ResourcesCreate(resources={"llm": llm}))
    version = resources.version
    trained = await seeded_call(egw, Mode.TRAIN, version, top_k=20)
    reference = await seeded_call(egw, Mode.VAL, version)
    truncated = await seeded_call(egw, Mode.VAL, version, top_k=20)  # validation honours it
    assert trained.request["top_k"] == 20  # what the agent sent is what the record shows
    assert trained.choices[0].token_ids == reference.choices[0].token_ids
    assert trained.choices[0].logprobs == pytest.approx(reference.choices[0].logprobs, abs=1e-5)
    # The whole vocabulary (1024 tokens of a random model): the top 20 hold far from all of
    # it, while the truncated distribution is renormalised over exactly those 20.
    assert all(mass < 0.9 for mass in top_mass(trained))
    assert top_mass(truncated) == pytest.approx([1.0] * len(top_mass(truncated)), abs=1e-3)
