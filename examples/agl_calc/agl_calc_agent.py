"""The calc tutorial's AutoGen agent, as an Agent Lightning 0.x agent run by fulmen.

Written in 0.x style: the only fulmen line is the import (``agentlightning`` in 0.x). An
AutoGen ``AssistantAgent`` with a calculator tool answers an arithmetic word problem; the
reward, emitted with ``agl.emit_reward``, is whether the last number it wrote is the answer.

0.x's tutorial reached its calculator through an MCP server; this version gives the assistant
the calculator as a plain function tool, so it needs no server process.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from typing import Any

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
_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("only numbers and + - * / are allowed")


async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"
    return f"{value:g}"


def math_problems(n: int = 32, seed: int = 0) -> list[dict[str, Any]]:
    """Word problems with their numeric answers (0.x's tutorial read them from parquet)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
        question = f"A shop has {a} boxes of {c} apples and sells {b} apples. How many are left?"
        out.append({"id": f"calc{i}", "question": question, "result": a * c - b})
    return out


def score(answer: str, result: float) -> float:
    """1.0 when the last number in the answer equals the result."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", answer)
    return 1.0 if numbers and abs(float(numbers[-1]) - float(result)) < 1e-6 else 0.0


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
        result = await assistant.run(task=task["question"])
        answer = str(result.messages[-1].content)
    finally:
        await client.close()
    agl.emit_reward(score(answer, task["result"]))
