"""The Responses ⇄ chat translation rules, one by one (pure functions, no network)."""

from __future__ import annotations

from typing import Any

import pytest

from fulmen.wire.errors import BadRequest
from fulmen.wire.responses.translate import (
    ResponseIds,
    assistant_message,
    chat_request,
    response_from_chat,
)


def test_items_become_chat_messages_with_one_assistant_turn_per_reply() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
            },
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "b", "arguments": '{"x":1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "two"}],
            },
        ],
        "temperature": 0.5,
        "store": False,
        "background": False,
        "previous_response_id": None,
        "metadata": {"k": "v"},
    }
    out = chat_request(body)
    assert out["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "b", "arguments": '{"x":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    assert out["temperature"] == 0.5 and out["model"] == "m"
    assert out.keys() == {"model", "messages", "temperature"}


def test_tools_choice_format_and_logprobs_map_to_chat_fields() -> None:
    schema = {"type": "object", "properties": {}}
    out = chat_request(
        {
            "model": "m",
            "input": "x",
            "tools": [{"type": "function", "name": "f", "parameters": schema, "strict": True}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}},
            "max_output_tokens": 7,
            "top_logprobs": 3,
        }
    )
    assert out["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    assert (out["max_tokens"], out["logprobs"], out["top_logprobs"]) == (7, True, 3)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input_image"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
        ({"input": [{"role": "tool", "content": "x"}]}, "'tool'"),
        ({"input": 3}, "int"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "tool_choice": {"type": "file_search"}}, "file_search"),
    ],
)
def test_what_chat_cannot_express_is_refused_by_name(body: dict[str, Any], named: str) -> None:
    with pytest.raises(BadRequest, match=named):
        chat_request({"model": "m", **body})


def test_chat_reply_and_back_keep_text_tool_calls_and_usage() -> None:
    chat = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Adding.",
                    "tool_calls": [
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {"name": "add", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    ids = ResponseIds()
    response = response_from_chat(chat, {"model": "m", "input": "x"}, ids)
    assert response["id"] == ids.response and response["status"] == "completed"
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][1]["call_id"] == "c9"
    assert response["usage"]["input_tokens"] == 5 and response["usage"]["output_tokens"] == 3
    assert assistant_message(response) == chat["choices"][0]["message"]
