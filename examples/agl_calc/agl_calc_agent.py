"""The calc tutorial's AutoGen agent, as an Agent Lightning 0.x agent run by fulmen.

Written in 0.x style: the only fulmen line is the import (``agentlightning`` in 0.x). An
AutoGen ``AssistantAgent`` with a calculator tool answers an arithmetic word problem, asked (as
0.x's tutorial asked) to give its answer as ``### ANSWER: <answer> ###``; the reward, emitted
with ``agl.emit_reward``, is whether that answer is the problem's result
(``agl_calc_data.score``).

0.x's tutorial reached its calculator through an MCP server and read its problems from parquet;
this version gives the assistant the calculator as a plain function tool, so it needs no server
process, and generates the problems (``agl_calc_data``: training and held-out splits).

The tutorial served an instruction-tuned model; this version is also measured on a small *base*
model (Gemma 3 270M), which scored 0 of 16 held-out problems when only asked: it copied the
tool description instead of calling the tool. So the assistant starts from worked examples,
ordinary AutoGen messages in its model context (question, calculator call, result,
``### ANSWER: n ###``), and the model client stops a turn where the examples' turns end.
"""

from __future__ import annotations

import json
from typing import Any

from agl_calc_data import evaluate, score
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    UserMessage,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient

import fulmen.compat.agentlightning as agl

AGENT_NAME = "calc"
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
#: The tutorial's output format, said once here rather than after every question: on a small
#: base model, the format text between the question and the tool call made it copy a worked
#: example's expression instead of the question's numbers.
SYSTEM_MESSAGE = (
    "Call the calculator once with one arithmetic expression that computes the answer. "
    + OUTPUT_FORMAT
)
#: Where a turn ends. A base model rarely writes its end-of-turn token: after a tool call it
#: goes on with markup of turns that are not its own (a tool response, closing tags), and after
#: ``### ANSWER: n ###`` with anything; the closing `` ###`` ends the answer (the score reads
#: ``### ANSWER: n`` without it too).
STOP = ["</tool_call>", "<tool_response>", "</tool_response>", "\n</", " ###"]

#: Worked examples: (question, the calculator's expression, its result), those of examples/math.
#: Their stories are not the problems' (two share a template's operations: a * b - c and
#: (a + b) * c), so the model has to map a problem onto an expression.
EXAMPLES: tuple[tuple[str, str, str], ...] = (
    (
        "Ann buys 4 bags of 6 oranges and eats 5 oranges. How many oranges does Ann have left?",
        "4 * 6 - 5",
        "19",
    ),
    (
        "A bakery sells 7 cakes and 5 pies every day. How many cakes and pies does it sell in "
        "3 days?",
        "(7 + 5) * 3",
        "36",
    ),
    (
        "Tim has 20 stamps. He gets 8 more stamps and then gives away 6. How many stamps does "
        "Tim have now?",
        "20 + 8 - 6",
        "22",
    ),
    (
        "24 stickers are shared equally among 4 friends, and each friend loses 2 of them. How "
        "many stickers does each friend have left?",
        "24 / 4 - 2",
        "4",
    ),
)


async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""
    try:
        value = evaluate(expression)
    except ValueError as exc:
        return f"error: {exc}"
    return str(int(value)) if value.is_integer() else f"{value:.6g}"


def worked_examples() -> list[LLMMessage]:
    """The examples as the turns the assistant itself takes: question, call, result, answer."""
    messages: list[LLMMessage] = []
    for number, (question, expression, result) in enumerate(EXAMPLES):
        call_id = f"example_{number}"
        arguments = json.dumps({"expression": expression})
        messages += [
            UserMessage(content=question, source="user"),
            AssistantMessage(
                content=[FunctionCall(id=call_id, name="calculator", arguments=arguments)],
                source=AGENT_NAME,
            ),
            FunctionExecutionResultMessage(
                content=[
                    FunctionExecutionResult(content=result, name="calculator", call_id=call_id)
                ]
            ),
            AssistantMessage(content=f"### ANSWER: {result} ###", source=AGENT_NAME),
        ]
    return messages


@agl.rollout
async def calc_agent(task: dict[str, Any], llm: agl.LLM) -> None:
    """Solve one problem with an AutoGen assistant; emit the reward."""
    client = OpenAIChatCompletionClient(
        model=llm.model,
        base_url=llm.endpoint,
        api_key=llm.api_key or "none",
        model_info=MODEL_INFO,
        temperature=llm.sampling_parameters.get("temperature", 0.7),
        max_tokens=40,  # a tool call is ~30 tokens, "### ANSWER: 107" ~7
        stop=STOP,
    )
    try:
        assistant = AssistantAgent(
            AGENT_NAME,
            model_client=client,
            tools=[calculator],
            reflect_on_tool_use=True,
            system_message=SYSTEM_MESSAGE,
            model_context=UnboundedChatCompletionContext(initial_messages=worked_examples()),
        )
        result = await assistant.run(task=task["question"])
        answer = str(result.messages[-1].content)
    finally:
        await client.close()
    agl.emit_reward(score(answer, task["result"]))
