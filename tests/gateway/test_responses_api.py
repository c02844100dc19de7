"""``/v1/responses`` through the gateway: sent to a token-level engine as chat, recorded with ids.

The agent uses the ``openai`` client's Responses API unchanged; the scripted engine serves only
chat completions (like fulmen's built-in server), so every assertion on token ids also proves
the call was translated.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from fulmen.gateway import GatewayConfig
from fulmen.transitions.export import sft_rows
from fulmen.transitions.trajectory import AttemptRecords
from tests.gateway.conftest import Running, SpyStore, gateway_over, new_attempt
from tests.gateway.scripted_upstream import Reply, Script, encode, logprob_of, render_chat

ADD_TOOL = {
    "type": "function",
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}


def client_for(gw: Running, rollout_id: str, attempt_id: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")


def assert_token_level(call: Any, *, prompt: str, generated: str) -> None:
    assert call.endpoint == "responses" and call.is_token_level
    assert call.prompt_token_ids == encode(prompt)
    (choice,) = call.choices
    assert choice.token_ids == encode(generated)
    assert choice.logprobs == [logprob_of(t, k) for k, t in enumerate(choice.token_ids)]


async def test_text_reply_is_token_level_and_shaped_as_a_response(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="four"))
    async with client_for(gw, rollout_id, attempt_id) as client:
        response = await client.responses.create(
            model="tiny-model", instructions="Be brief.", input="What is 2+2?", max_output_tokens=9
        )
    assert response.output_text == "four"
    assert response.status == "completed" and response.id.startswith("resp_")
    assert response.usage is not None and response.usage.output_tokens == 4
    sent = gw.script.requests[-1]  # what the engine got: a chat completion asking for ids
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert sent["max_tokens"] == 9 and sent["return_token_ids"] is True
    assert "input" not in sent and "instructions" not in sent
    (call,) = await gw.calls(rollout_id)
    assert_token_level(call, prompt=render_chat(sent["messages"]), generated="four")
    assert call.request["input"] == "What is 2+2?"  # the agent's request, as sent
    assert call.response is not None and call.response["object"] == "response"
    assert call.response_id == response.id  # spans name the call by the id the agent saw
    assert call.policy_version == "policy-7"


async def test_tool_call_round_trip_extends_the_prompt_token_exactly(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    history: list[Any] = [{"role": "user", "content": "What is 2+2?"}]
    async with client_for(gw, rollout_id, attempt_id) as client:
        first = await client.responses.create(model="tiny-model", input=history, tools=[ADD_TOOL])
        (item,) = first.output
        assert item.type == "function_call"
        assert (item.name, json.loads(item.arguments)) == ("add", {"a": 2, "b": 2})
        history += [item.model_dump(exclude_none=True)]
        history += [{"type": "function_call_output", "call_id": item.call_id, "output": "4"}]
        second = await client.responses.create(model="tiny-model", input=history, tools=[ADD_TOOL])
    assert second.output_text == "4"
    chat_tools = gw.script.requests[0]["tools"]
    assert chat_tools == [
        {
            "type": "function",
            "function": {k: ADD_TOOL[k] for k in ("name", "description", "parameters")},
        }
    ]
    messages = gw.script.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == item.call_id
    assert messages[2] == {"role": "tool", "tool_call_id": item.call_id, "content": "4"}
    calls = await gw.calls(rollout_id)
    assert [c.is_token_level for c in calls] == [True, True]
    assert calls[0].choices[0].finish_reason == "tool_calls"
    # Multi-call merging works: the second prompt starts with the first prompt + completion.
    sequence = calls[0].prompt_token_ids + calls[0].choices[0].token_ids
    assert calls[1].prompt_token_ids[: len(sequence)] == sequence


async def test_streamed_response_events_and_record(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="streamed answer"))
    async with client_for(gw, rollout_id, attempt_id) as client:
        stream = await client.responses.create(model="tiny-model", input="Say it", stream=True)
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "streamed answer"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "streamed answer"
    assert gw.script.requests[-1]["stream"] is True
    (call,) = await gw.calls(rollout_id)
    assert call.is_stream and call.response_id == final.id
    assert_token_level(
        call,
        prompt=render_chat([{"role": "user", "content": "Say it"}]),
        generated="streamed answer",
    )


async def test_streamed_tool_call_arrives_as_a_function_call_item(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(tool_calls=[("add", {"a": 1, "b": 3})]))
    async with client_for(gw, rollout_id, attempt_id) as client:
        stream = await client.responses.create(
            model="tiny-model", input="1+3?", tools=[ADD_TOOL], stream=True
        )
        events = [event async for event in stream]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.name, json.loads(i.arguments)) for i in done] == [
        ("function_call", "add", {"a": 1, "b": 3})
    ]
    assert events[-1].type == "response.completed"
    (call,) = await gw.calls(rollout_id)
    assert call.is_token_level and call.choices[0].finish_reason == "tool_calls"


async def test_streamed_event_sequences_are_complete(gw: Running) -> None:
    # Clients that build their reply from the deltas (the AI SDK, OpenCode) need every event.
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(content="two words"), Reply(tool_calls=[("add", {"a": 1})])])
    async with client_for(gw, rollout_id, attempt_id) as client:
        text_stream = await client.responses.create(model="tiny-model", input="x", stream=True)
        text = [e.type async for e in text_stream]
        call_stream = await client.responses.create(
            model="tiny-model", input="x", tools=[ADD_TOOL], stream=True
        )
        call = [e.type async for e in call_stream]
    deltas = text.count("response.output_text.delta")
    assert deltas > 1
    assert text == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert call == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]


async def test_logprobs_are_shown_only_when_asked(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(content="ab"), Reply(content="ab")])
    async with client_for(gw, rollout_id, attempt_id) as client:
        plain = await client.responses.create(model="tiny-model", input="x")
        asked = await client.responses.create(
            model="tiny-model", input="x", include=["message.output_text.logprobs"]
        )
    plain_part = plain.output[0].content[0]
    asked_part = asked.output[0].content[0]
    assert plain_part.type == asked_part.type == "output_text"
    assert not plain_part.logprobs
    assert [lp.logprob for lp in asked_part.logprobs or []] == [
        logprob_of(t, k) for k, t in enumerate(encode("ab"))
    ]


async def test_cut_reply_is_incomplete(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="a long answer"))
    async with client_for(gw, rollout_id, attempt_id) as client:
        response = await client.responses.create(model="tiny-model", input="x", max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "a l"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
    ],
)
async def test_what_needs_a_hosted_api_is_refused_by_name(
    gw: Running, extra: dict[str, Any], named: str
) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    async with client_for(gw, rollout_id, attempt_id) as client:
        with pytest.raises(openai.BadRequestError, match=named):
            await client.responses.create(model="tiny-model", input="x", **extra)
    assert gw.script.requests == []  # nothing reached the engine
    (call,) = await gw.calls(rollout_id)
    assert call.error is not None and named in str(call.error["message"])


async def test_namespaces_are_flattened_and_hosted_tools_dropped(gw: Running) -> None:
    # What the Codex CLI sends: MCP tools grouped in a namespace, and a hosted web search.
    namespace = {"type": "namespace", "name": "mcp__calc", "tools": [ADD_TOOL]}
    tools: Any = [namespace, {"type": "web_search"}]
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(tool_calls=[("add", {"a": 1, "b": 2})]))
    async with client_for(gw, rollout_id, attempt_id) as client:
        response = await client.responses.create(model="tiny-model", input="1+2?", tools=tools)
    (item,) = response.output
    assert item.type == "function_call" and item.name == "add"
    (sent,) = gw.script.requests
    assert [t["function"]["name"] for t in sent["tools"]] == ["add"]
    (call,) = await gw.calls(rollout_id)
    assert call.is_token_level
    assert call.request["tools"] == tools  # the agent's request as sent
    # The response (as recorded) names the tools the engine was given: web_search was dropped.
    assert call.response is not None
    assert [t["name"] for t in call.response["tools"]] == ["add"]


async def test_text_only_upstream_gets_the_responses_call_unchanged(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script(mode="hosted")
    async with gateway_over(store, script, config, is_token_level=False) as gw:
        rollout_id, attempt_id = await new_attempt(gw.store)
        async with client_for(gw, rollout_id, attempt_id) as client:
            # The scripted hosted API has no /v1/responses: its 404 proves the path was kept.
            with pytest.raises(openai.NotFoundError):
                await client.responses.create(model="tiny-model", input="x")
        assert script.requests == []
        (call,) = await gw.calls(rollout_id)
        assert call.endpoint == "responses" and not call.is_token_level


async def test_engine_failure_mid_stream_ends_with_response_failed(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.break_stream_after = 1
    gw.script.replies.append(Reply(content="never finished"))
    async with client_for(gw, rollout_id, attempt_id) as client:
        stream = await client.responses.create(model="tiny-model", input="x", stream=True)
        events = [event async for event in stream]
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "broke the stream" in events[-2].message
    assert events[-1].response.status == "failed"
    (call,) = await gw.calls(rollout_id)
    assert call.error is not None and not call.is_token_level


async def test_sft_export_reads_responses_records_as_chat(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    history: list[Any] = [{"role": "user", "content": "What is 2+2?"}]
    async with client_for(gw, rollout_id, attempt_id) as client:
        first = await client.responses.create(model="tiny-model", input=history, tools=[ADD_TOOL])
        (item,) = first.output
        history += [item.model_dump(exclude_none=True)]
        history += [{"type": "function_call_output", "call_id": item.call_id, "output": "4"}]
        await client.responses.create(model="tiny-model", input=history, tools=[ADD_TOOL])
    calls = await gw.calls(rollout_id)
    rows = sft_rows([AttemptRecords(rollout_id, attempt_id, None, calls, [])])
    assert [len(r["messages"]) for r in rows] == [2, 4]
    # The conversation is what the engine saw, then what it answered.
    assert rows[1]["messages"][:-1] == gw.script.requests[1]["messages"]
    assert rows[0]["messages"][-1]["tool_calls"][0]["function"] == {
        "name": "add",
        "arguments": json.dumps({"a": 2, "b": 2}, sort_keys=True),
    }
    assert rows[1]["messages"][-1] == {"role": "assistant", "content": "4"}
