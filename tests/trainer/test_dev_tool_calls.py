"""`fulmen dev` shows each call's tool calls and the tool results the agent sent back.

A real agent (the plain ``openai`` client with one function tool, run by the dev stack's runner)
talks through the real gateway to the scripted OpenAI-compatible server on 127.0.0.1, which
answers first with a tool call and then with text; the report must name the tool and its
arguments under the first call and the tool's result under the second.
"""

from __future__ import annotations

import io
import textwrap
from collections import deque
from pathlib import Path

from fulmen.trainer.config import load_config
from fulmen.trainer.dev import tool_calls_of, tool_results_of
from fulmen.trainer.trainer import Trainer
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

AGENT = """
import json
from typing import Any

import fulmen
from openai import AsyncOpenAI

TOOLS = [{
    "type": "function",
    "function": {
        "name": "multiply",
        "description": "Multiply two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}]


def tasks() -> list[dict[str, Any]]:
    return [{"id": "t0", "question": "What is 6 times 7?", "answer": "42"}]


@fulmen.rollout
async def multiplier(task: dict[str, Any], llm: fulmen.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    try:
        first = await client.chat.completions.create(
            model=llm.model, messages=messages, tools=TOOLS
        )
        message = first.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            arguments = json.loads(call.function.arguments)
            product = arguments["a"] * arguments["b"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(product)})
        second = await client.chat.completions.create(
            model=llm.model, messages=messages, tools=TOOLS
        )
    finally:
        await client.close()
    fulmen.emit_reward({"used_tool": 1.0 if message.tool_calls else 0.0}, primary="used_tool")
    return 1.0 if second.choices[0].message.content == task["answer"] else 0.0
"""


def write_project(tmp_path: Path) -> Path:
    (tmp_path / "dev_tool_agent.py").write_text(AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            model: tiny-model
            agent: dev_tool_agent:multiplier
            python_path: ["."]
            run_dir: run
            data: {train: "dev_tool_agent:tasks"}
            rollouts: {concurrency: 1, timeout_s: 60}
            """
        )
    )
    return config


async def test_dev_prints_tool_calls_and_tool_results(tmp_path: Path) -> None:
    script = Script(
        replies=deque([Reply(tool_calls=[("multiply", {"a": 6, "b": 7})]), Reply(content="42")])
    )
    config = load_config(write_project(tmp_path))
    out = io.StringIO()
    async with serve_app(create_upstream_app(script)) as upstream:
        report = await Trainer(config).adev(endpoint=f"{upstream}/v1", model="tiny-model", out=out)
    text = out.getvalue()
    assert report[0]["status"] == "succeeded" and report[0]["reward"] == 1.0, text
    assert report[0]["calls"] == 2 and report[0]["tool_calls"] == 1, text
    lines = [line.strip() for line in text.splitlines()]
    first, second = lines.index(_call_line(lines, 1)), lines.index(_call_line(lines, 2))
    # The tool call is reported under call #1, its result under call #2 (before its prompt).
    assert 'tool call:   multiply({"a": 6, "b": 7})' in lines[first:second], text
    assert "tool result: multiply -> 42" in lines[second:], text
    assert not any(line.startswith("tool result") for line in lines[first:second]), text
    # Every named reward is shown, not only the primary one.
    assert "rewards: reward=1.000 used_tool=1.000" in lines, text
    assert report[0]["rewards"] == {"used_tool": 1.0, "reward": 1.0}


def _call_line(lines: list[str], number: int) -> str:
    (line,) = [line for line in lines if line.startswith(f"call #{number} ")]
    return line


def test_tool_calls_and_results_in_the_responses_shape() -> None:
    response = {
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
        ]
    }
    assert tool_calls_of(response) == [("search", '{"q": "x"}')]
    request = {
        "input": [
            {"role": "user", "content": "find x"},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x is 3"},
        ]
    }
    assert tool_results_of(request) == [("search", "x is 3")]
    # Only results after the last other message were sent with this call.
    request["input"].append({"role": "user", "content": "and y?"})
    assert tool_results_of(request) == []
    assert tool_calls_of(None) == [] and tool_results_of({"messages": "text"}) == []
