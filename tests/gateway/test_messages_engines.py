"""``/v1/messages`` through the gateway to the real engines (built-in and vLLM, tiny model).

The Anthropic client's call reaches the engine as a chat completion and is recorded at token
level, whole and streamed: the prompt the engine saw is token for token the one the equivalent
chat call renders, and fulmen.transitions turns the records into transitions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import openai
import pytest

pytest.importorskip("torch")

from fulmen.engines.launcher import EngineProcess
from fulmen.gateway import GatewayConfig, create_app
from fulmen.transitions.trajectory import TransitionOptions, build_trajectory
from fulmen.types import Mode
from tests.gateway.conftest import Running, SpyStore, add_sampling, new_attempt
from tests.gateway.scripted_upstream import Script, serve_app

pytestmark = pytest.mark.slow
QUESTION = "Count: one two three"


@pytest.fixture
async def egw(engine: EngineProcess, store: SpyStore) -> AsyncIterator[Running]:
    config = GatewayConfig(
        flush_interval_s=0.01,
        connect_retries=0,
        read_timeout_s=120,
        model_map={"claude-sonnet-4-6": "tiny"},
    )
    app = create_app(store, [engine.base_url], config=config)
    async with serve_app(app) as url:
        yield Running(url, app.state.gateway, store, Script())


async def test_messages_whole_and_streamed_are_token_level(egw: Running) -> None:
    version = await add_sampling(egw.store, {"val": {"temperature": 0.0}})
    rollout_id, attempt_id = await new_attempt(egw.store, mode=Mode.VAL, resources_version=version)
    chat_client = openai.AsyncOpenAI(base_url=egw.base_url(rollout_id, attempt_id), api_key="x")
    root = f"{egw.url}/rollout/{rollout_id}/attempt/{attempt_id}"
    client = anthropic.AsyncAnthropic(base_url=root, api_key="x", max_retries=0)
    model, system = "claude-sonnet-4-6", "Be brief."
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": QUESTION}]
    async with chat_client, client:
        chat = await chat_client.chat.completions.create(
            model="tiny",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": QUESTION},
            ],
            max_tokens=6,
        )
        whole = await client.messages.create(
            model=model, system=system, messages=messages, max_tokens=6
        )
        async with client.messages.stream(
            model=model, system=system, messages=messages, max_tokens=6
        ) as stream:
            streamed = "".join([text async for text in stream.text_stream])
            final = await stream.get_final_message()
    (block,) = whole.content
    assert block.type == "text"
    assert streamed == block.text == chat.choices[0].message.content
    assert final.usage.output_tokens == whole.usage.output_tokens
    chat_call, whole_call, stream_call = await egw.calls(rollout_id)
    assert (whole_call.endpoint, stream_call.endpoint) == ("messages", "messages")
    assert stream_call.is_stream and not whole_call.is_stream
    for call in (whole_call, stream_call):
        assert call.is_token_level
        (choice,) = call.choices
        assert choice.token_ids is not None and choice.logprobs is not None
        assert len(choice.token_ids) == len(choice.logprobs) == call.usage["completion_tokens"]
        assert all(lp <= 0.0 for lp in choice.logprobs)
        assert call.prompt_token_ids == chat_call.prompt_token_ids
        assert choice.token_ids == chat_call.choices[0].token_ids
    assert whole.usage.input_tokens == len(whole_call.prompt_token_ids or [])
    trajectory = build_trajectory(
        rollout_id=rollout_id,
        calls=[whole_call, stream_call],
        spans=[],
        options=TransitionOptions(missing_reward=1.0),
    )
    transitions = trajectory.transitions
    assert len(transitions) == 2
    for transition, call in zip(transitions, (whole_call, stream_call), strict=True):
        assert transition.prompt_token_ids == call.prompt_token_ids
        assert transition.completion_token_ids == call.choices[0].token_ids
        assert transition.logprobs == call.choices[0].logprobs
