"""The calc tutorial's AutoGen agent, as an Agent Lightning 0.x agent run by fulmen.

Written in 0.x style: the only fulmen line is the import (``agentlightning`` in 0.x). An
AutoGen ``AssistantAgent`` with a calculator tool answers an arithmetic word problem, asked (as
0.x's tutorial asked) to give its answer as ``### ANSWER: <answer> ###``; the reward, emitted
with ``agl.emit_reward``, is whether that answer is the problem's result
(``agl_calc_data.score``).

0.x's tutorial reached its calculator through an MCP server and read its problems from parquet;
this version gives the assistant the calculator as a plain function tool, so it needs no server
process, and generates the problems (``agl_calc_data``: training and held-out splits).
"""

from __future__ import annotations

from typing import Any

from agl_calc_data import evaluate, score
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

import fulmen.compat.agentlightning as agl

MODEL_INFO: Any = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}
OUTPUT_FORMAT = (
    "Output the answer when you are ready. The answer should be surrounded by three sharps "
    "(`###`), in the form of ### ANSWER: <answer> ###."
)


async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""
    try:
        value = evaluate(expression)
    except ValueError as exc:
        return f"error: {exc}"
    return str(int(value)) if value.is_integer() else f"{value:.6g}"


@agl.rollout
async def calc_agent(task: dict[str, Any], llm: agl.LLM) -> None:
    """Solve one problem with an AutoGen assistant; emit the reward."""
    client = OpenAIChatCompletionClient(
        model=llm.model,
        base_url=llm.endpoint,
        api_key=llm.api_key or "none",
        model_info=MODEL_INFO,
        temperature=llm.sampling_parameters.get("temperature", 0.7),
        max_tokens=32,
    )
    try:
        assistant = AssistantAgent(
            "calc",
            model_client=client,
            tools=[calculator],
            reflect_on_tool_use=True,
            system_message="Use the calculator, then answer with the number.",
        )
        result = await assistant.run(task=f"{task['question']} {OUTPUT_FORMAT}")
        answer = str(result.messages[-1].content)
    finally:
        await client.close()
    agl.emit_reward(score(answer, task["result"]))
