"""The plain ``openai`` client through the gateway: every call lands in the store, token-level."""

from __future__ import annotations

import asyncio
import json

import openai

from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply, encode, logprob_of, render_chat

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def assert_token_level(call, *, text: str | None, prompt: str) -> None:
    assert call.is_token_level
    assert call.prompt_token_ids == encode(prompt)
    (choice,) = call.choices
    assert choice.text == text
    assert choice.token_ids is not None and len(choice.token_ids) > 0
    assert choice.logprobs == [logprob_of(t, k) for k, t in enumerate(choice.token_ids)]


async def test_sync_client_call_is_recorded_with_token_ids(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="4"))

    def run() -> str | None:
        client = openai.OpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
        with client:
            out = client.chat.completions.create(model="tiny-model", messages=MESSAGES)
        return out.choices[0].message.content

    assert await asyncio.to_thread(run) == "4"
    (call,) = await gw.calls(rollout_id)
    assert (call.rollout_id, call.attempt_id) == (rollout_id, attempt_id)
    assert_token_level(call, text="4", prompt=render_chat(MESSAGES))
    assert call.choices[0].token_ids == encode("4")
    assert call.request["messages"] == MESSAGES
    assert "return_token_ids" not in call.request  # the agent's request, as sent
    assert call.policy_version == "policy-7"
    assert call.response_id and call.response_id.startswith("chatcmpl-")
    assert call.usage["completion_tokens"] == 1
    assert call.model == "tiny-model"
    assert call.latency_s is not None and call.latency_s > 0
    assert call.sequence > 0
    # The engine was asked for ids and logprobs although the agent was not.
    sent = gw.script.requests[-1]
    assert sent["return_token_ids"] is True and sent["logprobs"] is True


async def test_async_client_many_calls_in_one_attempt(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        outs = await asyncio.gather(
            *[
                client.chat.completions.create(
                    model="tiny-model", messages=[{"role": "user", "content": f"q{i}"}]
                )
                for i in range(5)
            ]
        )
    assert [o.choices[0].message.content for o in outs] == ["ok"] * 5
    calls = await gw.calls(rollout_id)
    assert len(calls) == 5
    assert len({c.call_id for c in calls}) == 5
    assert sorted(c.sequence for c in calls) == [c.sequence for c in calls]
    for call in calls:
        assert call.is_token_level
        assert call.choices[0].token_ids == encode("ok")


async def test_streaming_records_token_ids_from_chunks(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    text = "The answer is four, of course."
    gw.script.replies.append(Reply(content=text))
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        stream = await client.chat.completions.create(
            model="tiny-model", messages=MESSAGES, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    # The agent did not ask for usage or ids: the gateway's additions are not shown.
    assert all(c.choices for c in chunks)
    assert all(not (c.model_extra or {}).get("prompt_token_ids") for c in chunks)
    assert all(c.choices[0].logprobs is None for c in chunks)
    (call,) = await gw.calls(rollout_id)
    assert call.is_stream
    assert_token_level(call, text=text, prompt=render_chat(MESSAGES))
    assert call.choices[0].token_ids == encode(text)
    assert call.choices[0].finish_reason == "stop"
    assert call.usage["completion_tokens"] == len(text)
    assert call.policy_version == "policy-7"


async def test_tool_calls_round_trip(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend(
        [Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="It is 4.")]
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                },
            },
        }
    ]
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        first = await client.chat.completions.create(
            model="tiny-model", messages=MESSAGES, tools=tools
        )
        (tool_call,) = first.choices[0].message.tool_calls or []
        args = json.loads(tool_call.function.arguments)
        messages = [
            *MESSAGES,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": str(args["a"] + args["b"])},
        ]
        second = await client.chat.completions.create(
            model="tiny-model", messages=messages, tools=tools
        )
    assert first.choices[0].finish_reason == "tool_calls"
    assert second.choices[0].message.content == "It is 4."
    calls = await gw.calls(rollout_id)
    assert len(calls) == 2
    assert all(c.is_token_level for c in calls)
    assert calls[0].choices[0].finish_reason == "tool_calls"
    assert calls[0].choices[0].text is None
    assert calls[0].response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"
    # The second prompt extends the first prompt + completion token-exactly (char tokenizer).
    first_ids = calls[0].prompt_token_ids + calls[0].choices[0].token_ids
    assert calls[1].prompt_token_ids[: len(calls[0].prompt_token_ids)] == calls[0].prompt_token_ids
    assert len(calls[1].prompt_token_ids) > len(first_ids)
    assert calls[1].request["messages"][2]["role"] == "tool"


async def test_streaming_tool_calls_are_accumulated(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(tool_calls=[("lookup", {"key": "alpha beta gamma"})]))
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        stream = await client.chat.completions.create(
            model="tiny-model", messages=MESSAGES, stream=True
        )
        args = ""
        async for chunk in stream:
            for tc in chunk.choices[0].delta.tool_calls or []:
                args += (tc.function and tc.function.arguments) or ""
    assert json.loads(args) == {"key": "alpha beta gamma"}
    (call,) = await gw.calls(rollout_id)
    assert call.is_token_level
    message = call.response["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": json.dumps({"key": "alpha beta gamma"}),
    }
    assert call.choices[0].finish_reason == "tool_calls"


async def test_completions_with_token_id_prompt(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="xyz"))
    prompt = [5, 17, 300, 42]
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        out = await client.completions.create(model="tiny-model", prompt=prompt, max_tokens=8)
    assert out.choices[0].text == "xyz"
    assert out.choices[0].logprobs is None  # not asked for: stripped
    (call,) = await gw.calls(rollout_id)
    assert call.endpoint == "completions"
    assert call.is_token_level
    assert call.prompt_token_ids == prompt
    assert call.choices[0].token_ids == encode("xyz")
    assert call.choices[0].logprobs == [logprob_of(t, k) for k, t in enumerate(encode("xyz"))]
    assert gw.script.requests[-1]["logprobs"] == 1


async def test_streamed_completions_are_token_level(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="streamed text"))
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        stream = await client.completions.create(
            model="tiny-model", prompt="Say:", max_tokens=50, stream=True
        )
        text = "".join([c.choices[0].text async for c in stream])
    assert text == "streamed text"
    (call,) = await gw.calls(rollout_id)
    assert call.is_stream and call.is_token_level
    assert call.prompt_token_ids == encode("Say:")
    assert call.choices[0].text == "streamed text"
    assert call.choices[0].token_ids == encode("streamed text")


async def test_models_route_passes_through(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["tiny-model"]
    assert await gw.calls(rollout_id) == []
