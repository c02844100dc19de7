"""``/v1/messages`` through the gateway: Anthropic's API sent to a token-level engine as chat.

The agent is the official ``anthropic`` client (or plain HTTP where the exact bytes matter);
the scripted engine serves only chat completions, like fulmen's built-in server, so every
assertion on token ids also proves the call was translated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from fulmen.gateway import GatewayConfig, create_app
from fulmen.transitions.export import sft_rows
from fulmen.transitions.trajectory import AttemptRecords
from tests.gateway.conftest import Running, SpyStore, new_attempt
from tests.gateway.scripted_upstream import (
    Reply,
    Script,
    encode,
    logprob_of,
    render_chat,
    serve_app,
)

ADD_TOOL = {
    "name": "add",
    "description": "Add two integers.",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
# Fields Claude Code sends that a chat completion has no use for: all ignored.
CLAUDE_CODE_EXTRAS: dict[str, Any] = {
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
    "metadata": {"user_id": "user_abc_session_1"},
    "service_tier": "auto",
    "container": "container_1",
    "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "m"}],
    "output_format": None,
}


def client_for(gw: Running, rollout_id: str, attempt_id: str) -> anthropic.AsyncAnthropic:
    # Anthropic clients take the root and append /v1/messages themselves.
    base = f"{gw.url}/rollout/{rollout_id}/attempt/{attempt_id}"
    return anthropic.AsyncAnthropic(base_url=base, api_key="x", max_retries=0)


async def sse_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """Read a Messages stream as (event name, data) pairs, checking the two agree."""
    out: list[tuple[str, dict[str, Any]]] = []
    raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = orjson.loads(lines["data"])
        assert data["type"] == lines["event"]
        out.append((lines["event"], data))
    return out


async def stream_events(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """POST a streamed Messages call and read its events (the reply must be an event stream)."""
    async with (
        httpx.AsyncClient() as client,
        client.stream("POST", url, json=body, headers=headers or {"x-api-key": "x"}) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        return await sse_events(response)


async def post_messages(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(url, json=body, headers=headers or {"x-api-key": "x"})


async def test_text_reply_is_token_level_and_shaped_as_a_message(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="four"))
    async with client_for(gw, rollout_id, attempt_id) as client:
        message = await client.messages.create(
            model="tiny-model",
            system="Be brief.",
            messages=[{"role": "user", "content": "What is 2+2?"}],
            max_tokens=9,
        )
    assert message.id.startswith("msg_") and message.type == "message"
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", "four")]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.model == "tiny-model"
    sent = gw.script.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert sent["max_tokens"] == 9 and sent["return_token_ids"] is True
    prompt = render_chat(sent["messages"])
    assert (message.usage.input_tokens, message.usage.output_tokens) == (len(prompt), 4)
    (call,) = await gw.calls(rollout_id)
    assert call.endpoint == "messages" and call.is_token_level
    assert call.prompt_token_ids == encode(prompt)
    (choice,) = call.choices
    assert choice.token_ids == encode("four")
    assert choice.logprobs == [logprob_of(t, k) for k, t in enumerate(choice.token_ids)]
    assert call.request["system"] == "Be brief."  # the agent's request, as sent
    assert call.response is not None and call.response["type"] == "message"
    assert call.response_id == message.id


async def test_streamed_text_event_sequence_and_record(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="streamed answer"))
    body = {
        "model": "tiny-model",
        "max_tokens": 32,
        "stream": True,
        "messages": [{"role": "user", "content": "Say it"}],
    }
    url = f"{gw.url}/rollout/{rollout_id}/attempt/{attempt_id}/v1/messages?beta=true"
    events = await stream_events(url, body)
    kinds = [kind for kind, _ in events]
    deltas = kinds.count("content_block_delta")
    assert deltas > 1
    assert kinds == [
        "message_start",
        "ping",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["id"].startswith("msg_")
    prompt = render_chat([{"role": "user", "content": "Say it"}])
    assert start["usage"]["input_tokens"] == len(prompt)
    assert events[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    text = "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta")
    assert text == "streamed answer"
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == len("streamed answer")
    sent = gw.script.requests[-1]
    assert sent["stream"] is True and "beta" not in json.dumps(sent)
    (call,) = await gw.calls(rollout_id)
    assert call.endpoint == "messages" and call.is_stream and call.is_token_level
    assert call.prompt_token_ids == encode(prompt)
    assert call.choices[0].token_ids == encode("streamed answer")
    assert call.response_id == start["id"]


async def test_sdk_stream_reads_text_and_final_message(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="hello there"))
    async with (
        client_for(gw, rollout_id, attempt_id) as client,
        client.messages.stream(
            model="tiny-model", max_tokens=32, messages=[{"role": "user", "content": "Hi"}]
        ) as stream,
    ):
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(pieces) == "hello there"
    assert final.content[0].type == "text" and final.stop_reason == "end_turn"


async def test_tool_use_round_trip_extends_the_prompt_token_exactly(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    history: list[Any] = [{"role": "user", "content": "What is 2+2?"}]
    tools: Any = [ADD_TOOL]
    async with client_for(gw, rollout_id, attempt_id) as client:
        first = await client.messages.create(
            model="tiny-model", max_tokens=64, messages=history, tools=tools
        )
        (block,) = first.content
        assert block.type == "tool_use" and block.id.startswith("toolu_")
        assert (block.name, block.input) == ("add", {"a": 2, "b": 2})
        assert first.stop_reason == "tool_use"
        history.append({"role": "assistant", "content": [block.model_dump()]})
        result = {"type": "tool_result", "tool_use_id": block.id, "content": "4"}
        history.append({"role": "user", "content": [result]})
        second = await client.messages.create(
            model="tiny-model", max_tokens=64, messages=history, tools=tools
        )
    assert second.content[0].type == "text" and second.content[0].text == "4"
    function = {k: ADD_TOOL[k] for k in ("name", "description")}
    function["parameters"] = ADD_TOOL["input_schema"]
    assert gw.script.requests[0]["tools"] == [{"type": "function", "function": function}]
    messages = gw.script.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"] == [
        {
            "id": block.id,
            "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 2})},
        }
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": block.id, "content": "4"}
    calls = await gw.calls(rollout_id)
    assert [c.is_token_level for c in calls] == [True, True]
    assert calls[0].choices[0].finish_reason == "tool_calls"
    sequence = calls[0].prompt_token_ids + calls[0].choices[0].token_ids
    assert calls[1].prompt_token_ids[: len(sequence)] == sequence
    # SFT export reads Messages records as the chat conversation the engine saw.
    rows = sft_rows([AttemptRecords(rollout_id, attempt_id, None, calls, [])])
    assert rows[1]["messages"][:-1] == messages
    assert rows[1]["messages"][-1] == {"role": "assistant", "content": "4"}


async def test_streamed_tool_use_event_sequence(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(tool_calls=[("add", {"a": 1, "b": 3})]))
    body = {
        "model": "tiny-model",
        "max_tokens": 64,
        "stream": True,
        "tools": [ADD_TOOL],
        "messages": [{"role": "user", "content": "1+3?"}],
    }
    url = f"{gw.url}/rollout/{rollout_id}/attempt/{attempt_id}/v1/messages"
    events = await stream_events(url, body)
    assert [kind for kind, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    opened = events[2][1]["content_block"]
    assert (opened["type"], opened["name"], opened["input"]) == ("tool_use", "add", {})
    delta = events[3][1]["delta"]
    assert delta["type"] == "input_json_delta"
    assert json.loads(delta["partial_json"]) == {"a": 1, "b": 3}
    assert events[5][1]["delta"]["stop_reason"] == "tool_use"
    # The SDK assembles the same stream into a tool_use block.
    gw.script.replies.append(Reply(tool_calls=[("add", {"a": 1, "b": 3})]))
    async with (
        client_for(gw, rollout_id, attempt_id) as client,
        client.messages.stream(
            model="tiny-model", max_tokens=64, tools=[ADD_TOOL], messages=body["messages"]
        ) as stream,
    ):
        final = await stream.get_final_message()
    (block,) = final.content
    assert block.type == "tool_use" and block.input == {"a": 1, "b": 3}
    calls = await gw.calls(rollout_id)
    assert [c.is_token_level for c in calls] == [True, True]


async def test_system_blocks_mid_conversation_system_and_unknown_fields(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    body: dict[str, Any] = {
        "model": "tiny-model",
        "max_tokens": 16,
        "system": [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Answer in English."},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<reminder>be kind</reminder>"},
                    {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Hello."},
                ],
            },
            {"role": "system", "content": "The user changed the directory."},
            {"role": "user", "content": "And now?"},
        ],
        "tools": [{**ADD_TOOL, "defer_loading": True, "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "auto"},
        "stop_sequences": ["END"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        **CLAUDE_CODE_EXTRAS,
    }
    url = f"{gw.url}/rollout/{rollout_id}/attempt/{attempt_id}/v1/messages?beta=true"
    response = await post_messages(url, body, {"x-api-key": "x", "anthropic-beta": "a,b"})
    assert response.status_code == 200, response.text
    sent = gw.script.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse.\n\nAnswer in English."},
        {"role": "user", "content": "<reminder>be kind</reminder>\n\nHi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "The user changed the directory."},
        {"role": "user", "content": "And now?"},
    ]
    assert (sent["temperature"], sent["top_p"], sent["top_k"]) == (0.5, 0.9, 20)
    assert sent["stop"] == ["END"] and sent["tool_choice"] == "auto"
    assert sent["tools"][0]["function"]["name"] == "add"
    for name in [*CLAUDE_CODE_EXTRAS, "system", "stop_sequences"]:
        assert name not in sent
    (call,) = await gw.calls(rollout_id)
    assert call.is_token_level


@pytest.mark.parametrize(
    ("choice", "chat"),
    [
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        (
            {"type": "tool", "name": "add", "disable_parallel_tool_use": True},
            {"type": "function", "function": {"name": "add"}},
        ),
    ],
)
async def test_tool_choice_maps_to_chat(gw: Running, choice: dict[str, Any], chat: Any) -> None:
    body = {
        "model": "tiny-model",
        "max_tokens": 8,
        "tools": [ADD_TOOL],
        "tool_choice": choice,
        "messages": [{"role": "user", "content": "x"}],
    }
    response = await post_messages(f"{gw.url}/v1/messages", body)
    assert response.status_code == 200
    sent = gw.script.requests[-1]
    assert sent["tool_choice"] == chat
    assert sent.get("parallel_tool_calls", True) is not choice.get("disable_parallel_tool_use")


async def test_cut_reply_stops_at_max_tokens(gw: Running) -> None:
    gw.script.replies.append(Reply(content="a long answer"))
    body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}
    response = await post_messages(f"{gw.url}/v1/messages", body)
    message = response.json()
    assert message["stop_reason"] == "max_tokens"
    assert message["content"] == [{"type": "text", "text": "a l"}]


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ({"type": "image", "source": {"type": "base64", "data": "AA=="}}, "'image'"),
        ({"type": "document", "source": {"type": "text", "data": "x"}}, "'document'"),
    ],
)
async def test_refusals_come_in_anthropic_error_shape(
    gw: Running, block: dict[str, Any], named: str
) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    messages: Any = [{"role": "user", "content": [block]}]
    async with client_for(gw, rollout_id, attempt_id) as client:
        with pytest.raises(anthropic.BadRequestError, match=named) as caught:
            await client.messages.create(model="tiny-model", max_tokens=8, messages=messages)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert gw.script.requests == []  # nothing reached the engine
    (call,) = await gw.calls(rollout_id)
    assert call.error is not None and named in str(call.error["message"])


async def test_gateway_errors_before_translation_are_anthropic_shaped(gw: Running) -> None:
    unknown = await post_messages(f"{gw.url}/rollout/r-x/attempt/a-x/v1/messages", {})
    assert unknown.status_code == 404
    assert unknown.json()["type"] == "error"
    assert unknown.json()["error"]["type"] == "not_found_error"
    async with httpx.AsyncClient() as client:
        bad = await client.post(f"{gw.url}/v1/messages", content=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    # Other endpoints keep OpenAI's shape.
    chat = await post_messages(f"{gw.url}/rollout/r-x/attempt/a-x/v1/chat/completions", {})
    assert chat.json()["error"]["code"] == "not_found"


async def test_engine_failure_mid_stream_ends_with_an_error_event(gw: Running) -> None:
    gw.script.break_stream_after = 1
    gw.script.replies.append(Reply(content="never finished"))
    body = {
        "model": "m",
        "max_tokens": 32,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    events = await stream_events(f"{gw.url}/v1/messages", body, {})
    kind, data = events[-1]
    assert kind == "error" and data["error"]["type"] == "api_error"
    assert "broke the stream" in data["error"]["message"]


async def test_untracked_path_and_doubled_v1_prefix(gw: Running) -> None:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    untracked = await post_messages(f"{gw.url}/v1/messages", body)
    assert untracked.json()["type"] == "message"
    rollout_id, attempt_id = await new_attempt(gw.store)
    # A client given the rollout URL that ends in /v1 appends /v1/messages to it.
    doubled = f"{gw.url}/rollout/{rollout_id}/attempt/{attempt_id}/v1/v1/messages"
    assert (await post_messages(doubled, body)).json()["type"] == "message"
    (call,) = await gw.calls(rollout_id)
    assert call.endpoint == "messages" and call.is_token_level


@pytest.fixture
async def guarded(store: SpyStore, upstream_url: str, script: Script) -> AsyncIterator[Running]:
    config = GatewayConfig(
        flush_interval_s=0.01,
        connect_retries=0,
        read_timeout_s=5.0,
        model_map={"claude-sonnet-4-6": "tiny-model", "*": "policy"},
    )
    app = create_app(store, [upstream_url], config=config, token="s3cret")
    async with serve_app(app) as url:
        yield Running(url, app.state.gateway, store, script)


async def test_x_api_key_is_the_gateway_token(guarded: Running) -> None:
    rollout_id, attempt_id = await new_attempt(guarded.store)
    root = f"{guarded.url}/rollout/{rollout_id}/attempt/{attempt_id}"
    async with anthropic.AsyncAnthropic(base_url=root, api_key="wrong", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await bad.messages.create(
                model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "x"}]
            )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "missing or wrong API key"},
    }
    async with anthropic.AsyncAnthropic(base_url=root, api_key="s3cret", max_retries=0) as good:
        message = await good.messages.create(
            model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert message.model == "claude-sonnet-4-6"  # the name the agent asked for
    # The token itself never travels upstream; a bearer works as well.
    assert "x-api-key" not in guarded.script.headers[-1]
    one = {"role": "user", "content": "y"}
    body = {"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": [one]}
    bearer = await post_messages(f"{root}/v1/messages", body, {"authorization": "Bearer s3cret"})
    assert bearer.status_code == 200


async def test_model_map_sends_every_api_to_the_policy(guarded: Running) -> None:
    headers = {"authorization": "Bearer s3cret"}
    one = {"role": "user", "content": "x"}
    await post_messages(
        f"{guarded.url}/v1/messages",
        {"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": [one]},
        headers,
    )
    await post_messages(
        f"{guarded.url}/v1/messages",
        {"model": "claude-haiku-4-5", "max_tokens": 8, "messages": [one]},
        headers,
    )
    await post_messages(
        f"{guarded.url}/v1/chat/completions", {"model": "gpt-4o", "messages": [one]}, headers
    )
    await post_messages(f"{guarded.url}/v1/responses", {"model": "gpt-5", "input": "x"}, headers)
    sent = [r["model"] for r in guarded.script.requests]
    assert sent == ["tiny-model", "policy", "policy", "policy"]
    await guarded.gateway.flush()
    asked = [c.request["model"] for c in guarded.store.added]
    assert asked == ["claude-sonnet-4-6", "claude-haiku-4-5", "gpt-4o", "gpt-5"]
