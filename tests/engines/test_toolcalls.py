from __future__ import annotations

import json

from fulmen.engines.builtin.toolcalls import ToolCallStreamFilter, parse_tool_calls


def test_parses_one_call_and_keeps_content() -> None:
    content, calls = parse_tool_calls(
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call>"
    )
    assert content == "Let me check."
    assert len(calls) == 1
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_parses_several_calls_and_string_arguments() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>'
    )
    content, calls = parse_tool_calls(text)
    assert content is None
    assert [c["function"]["name"] for c in calls] == ["a", "b"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"y": 2}
    assert calls[0]["id"] != calls[1]["id"]


def test_unterminated_call_at_the_end_is_parsed() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}')
    assert calls[0]["function"]["name"] == "f"


def test_malformed_blocks_stay_content() -> None:
    for text in (
        "<tool_call>not json</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        "plain text",
        '<tool_call>["name"]</tool_call>',
    ):
        content, calls = parse_tool_calls(text)
        assert calls == [] and content == text


def test_stream_filter_holds_back_markup() -> None:
    f = ToolCallStreamFilter()
    pieces = [
        "Sure",
        ", one moment <",
        "tool_",
        'call>{"name": "f", ',
        '"arguments": {"a": 1}}',
        "</tool_call>",
    ]
    streamed = "".join(f.feed(p) for p in pieces)
    rest, calls = f.finish()
    assert streamed + rest == "Sure, one moment "
    assert calls[0]["function"]["name"] == "f"


def test_stream_filter_passes_plain_text_through() -> None:
    f = ToolCallStreamFilter()
    streamed = "".join(f.feed(p) for p in ["a < b", " and c <t", "ool"])
    rest, calls = f.finish()
    assert streamed + rest == "a < b and c <tool" and calls == []
