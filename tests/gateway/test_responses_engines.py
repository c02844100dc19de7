"""``/v1/responses`` through the gateway to the real engines (built-in and vLLM, tiny model).

Both engines answer the translated chat request with token ids and logprobs, whole and
streamed; the prompt the engine saw is exactly the one the equivalent chat call renders; a tool
call the model itself generates (a trained adapter) comes back as a ``function_call`` item.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

pytest.importorskip("torch")

from fulmen.engines.launcher import EngineProcess
from fulmen.gateway import GatewayConfig, create_app
from fulmen.types import Mode
from tests.engines.adapters import CALL_ARGUMENTS, MESSAGES, TOOLS
from tests.gateway.conftest import Running, SpyStore, add_sampling, new_attempt
from tests.gateway.scripted_upstream import Script, serve_app

pytestmark = pytest.mark.slow
QUESTION = "Count: one two three"


@pytest.fixture
async def egw(engine: EngineProcess, store: SpyStore) -> AsyncIterator[Running]:
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, read_timeout_s=120)
    app = create_app(store, [engine.base_url], config=config)
    async with serve_app(app) as url:
        yield Running(url, app.state.gateway, store, Script())


async def test_responses_whole_and_streamed_are_token_level(egw: Running) -> None:
    version = await add_sampling(egw.store, {"val": {"temperature": 0.0}})
    rollout_id, attempt_id = await new_attempt(egw.store, mode=Mode.VAL, resources_version=version)
    client = openai.AsyncOpenAI(base_url=egw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        chat = await client.chat.completions.create(
            model="tiny",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": QUESTION},
            ],
            max_tokens=6,
        )
        whole = await client.responses.create(
            model="tiny", instructions="Be brief.", input=QUESTION, max_output_tokens=6
        )
        stream = await client.responses.create(
            model="tiny",
            instructions="Be brief.",
            input=QUESTION,
            max_output_tokens=6,
            stream=True,
        )
        events = [event async for event in stream]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert deltas == whole.output_text == chat.choices[0].message.content
    chat_call, whole_call, stream_call = await egw.calls(rollout_id)
    assert (whole_call.endpoint, stream_call.endpoint) == ("responses", "responses")
    assert stream_call.is_stream and not whole_call.is_stream
    for call in (whole_call, stream_call):
        assert call.is_token_level
        (choice,) = call.choices
        assert choice.token_ids is not None and choice.logprobs is not None
        assert len(choice.token_ids) == len(choice.logprobs) == call.usage["completion_tokens"]
        assert all(lp <= 0.0 for lp in choice.logprobs)
        # The translated request renders the same prompt as the chat call, token for token.
        assert call.prompt_token_ids == chat_call.prompt_token_ids
        assert choice.token_ids == chat_call.choices[0].token_ids
    assert whole.usage is not None
    assert whole.usage.output_tokens == len(whole_call.choices[0].token_ids or [])


async def test_responses_tool_call_from_real_model_output(
    engine: EngineProcess, tool_adapter: Path, egw: Running
) -> None:
    # An adapter trained to answer MESSAGES with a get_weather call: the engine parses the
    # model's own output into tool calls, which come back as function_call items.
    await engine.load_adapter("weather", str(tool_adapter))
    (function,) = [t["function"] for t in TOOLS]
    tools: list[Any] = [{"type": "function", **function}]
    rollout_id, attempt_id = await new_attempt(egw.store)
    client = openai.AsyncOpenAI(base_url=egw.base_url(rollout_id, attempt_id), api_key="x")
    try:
        async with client:
            ask = {"model": "weather", "input": MESSAGES[0]["content"], "tools": tools}
            whole = await client.responses.create(**ask, temperature=0, max_output_tokens=40)
            stream = await client.responses.create(
                **ask, temperature=0, max_output_tokens=40, stream=True
            )
            events = [event async for event in stream]
    finally:
        await engine.unload_adapter("weather")
    final = events[-1].response
    for response in (whole, final):
        (item,) = [i for i in response.output if i.type == "function_call"]
        assert item.name == "get_weather" and json.loads(item.arguments) == CALL_ARGUMENTS
    calls = await egw.calls(rollout_id)
    assert [(c.is_stream, c.is_token_level) for c in calls] == [(False, True), (True, True)]
    assert [c.choices[0].finish_reason for c in calls] == ["tool_calls", "tool_calls"]
    assert calls[0].choices[0].token_ids == calls[1].choices[0].token_ids
