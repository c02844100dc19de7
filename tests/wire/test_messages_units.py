"""The Messages ⇄ chat translation rules and the Responses tool rule (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from fulmen.gateway import GatewayConfig
from fulmen.wire.errors import BadRequest
from fulmen.wire.messages.translate import (
    MessageIds,
    anthropic_error_body,
    chat_request,
    message_from_chat,
    stop_reason,
    tool_input,
)
from fulmen.wire.responses.tools import function_tools, served_tools
from fulmen.wire.table import error_body_for


def test_tool_results_become_tool_messages_in_order() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Running both."},
                    {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": "é"}},
                    {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "no such file"}],
                    },
                    {"type": "text", "text": "Continue."},
                ],
            },
        ],
    }
    out = chat_request(body)
    assert out.request["messages"] == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Running both.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "a", "arguments": '{"x": "é"}'},
                },
                {"id": "t2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "one"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no such file"},
        {"role": "user", "content": "Continue."},
    ]
    assert out.request.keys() == {"model", "messages"} and out.dropped_tools == []


def test_server_tools_are_dropped_and_named() -> None:
    tools = [
        {"name": "f", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "g", "input_schema": {"type": "object"}, "description": "G"},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    out = chat_request({"model": "m", "messages": [], "tools": tools})
    assert out.request["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {
            "type": "function",
            "function": {"name": "g", "parameters": {"type": "object"}, "description": "G"},
        },
    ]
    assert out.dropped_tools == ["web_search_20250305"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ({"messages": [], "system": [{"type": "image"}]}, "system[0]"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "content": [{"type": "image"}]}],
                    }
                ]
            },
            "messages[0].content[0].content[0]",
        ),
        ({"messages": [], "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ],
)
def test_what_chat_cannot_express_is_refused_naming_the_field(
    body: dict[str, Any], param: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        chat_request({"model": "m", **body})
    assert caught.value.detail == {"param": param}


def test_reply_blocks_ids_and_stop_reasons() -> None:
    ids = MessageIds()
    chat = {
        "model": "policy",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Let me add.",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "add", "arguments": "{not json"},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }
    message = message_from_chat(chat, {"model": "claude-x"}, ids)
    assert message["model"] == "claude-x" and message["id"] == ids.message
    assert message["content"] == [
        {"type": "text", "text": "Let me add."},
        {"type": "tool_use", "id": ids.tool_use(0), "name": "add", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["input_tokens"] == 7 and message["usage"]["output_tokens"] == 3
    request = {"stop_sequences": ["END"]}
    assert stop_reason({"finish_reason": "stop", "stop_reason": "END"}, request) == (
        "stop_sequence",
        "END",
    )
    assert stop_reason({"finish_reason": "stop", "stop_reason": 2}, request) == ("end_turn", None)
    assert stop_reason({"finish_reason": "length"}, request) == ("max_tokens", None)
    assert tool_input('{"a": 1}') == {"a": 1} and tool_input("[1]") == {}


def test_responses_namespaces_flatten_and_hosted_tools_drop() -> None:
    add = {"type": "function", "name": "add", "parameters": {"type": "object"}}
    read = {"type": "function", "name": "read", "description": "Read.", "strict": False}
    tools = [
        {"type": "namespace", "name": "mcp__fs", "description": "FS", "tools": [read]},
        {"type": "web_search"},
        add,
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
    ]
    chat, dropped = served_tools(tools)
    assert [t["function"]["name"] for t in chat] == ["read", "add"]
    assert chat[0] == {
        "type": "function",
        "function": {"name": "read", "description": "Read.", "strict": False},
    }
    assert dropped == ["web_search", "custom"]
    assert function_tools(tools) == [read, add]


def test_model_map_and_error_shapes() -> None:
    config = GatewayConfig(model_map={"claude-sonnet-4-6": "policy", "*": "default"})
    assert config.engine_model("claude-sonnet-4-6") == "policy"
    assert config.engine_model("gpt-5") == "default"
    assert config.engine_model(None) is None
    assert GatewayConfig().engine_model("gpt-5") == "gpt-5"
    with pytest.raises(ValueError, match="non-empty"):
        GatewayConfig(model_map={"": "policy"})
    assert anthropic_error_body(504, "slow")["error"]["type"] == "api_error"
    assert anthropic_error_body(409, "done")["error"]["type"] == "invalid_request_error"
    openai_body = {"error": {"message": "boom", "type": "x", "param": None, "code": None}}
    assert error_body_for("chat/completions", 400, openai_body) is openai_body
    assert error_body_for("messages", 429, openai_body) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "boom"},
    }
