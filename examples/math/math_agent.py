"""The math agent: an AutoGen AgentChat ``AssistantAgent`` with a calculator tool.

Written as an AutoGen developer writes one: a plain Python function becomes the ``calculator``
tool, ``OpenAIChatCompletionClient`` talks to the model, and ``reflect_on_tool_use=True`` makes
the agent ask the model once more, after the tool ran, to state the answer. The worked examples
a *base* model needs are ordinary AutoGen messages in the agent's model context (question, tool
call, tool result, ``ANSWER: n``), so the model sees each example in the same chat turns it
must produce itself.

A rollout makes two model calls when the model calls the tool (the tool call, then the answer
after the result) and one when it answers without the tool. Both calls belong to the agent
``math_solver``; both are trained. The reward is 1.0 for the exact answer (``math_data.score``).

The only fulmen-specific lines: ``@fulmen.rollout``, the client's ``model``/``base_url``/
``api_key`` from ``llm``, and returning the reward.
"""

from __future__ import annotations

import json
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelInfo,
    UserMessage,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient
from math_data import evaluate, make_tasks, score

import fulmen

AGENT_NAME = "math_solver"

SYSTEM_MESSAGE = (
    "You solve math word problems. Call the calculator once with one arithmetic expression "
    "that computes the answer. After you get the result, reply with ANSWER: <number>."
)

#: Where a turn ends. The base model rarely writes Gemma's end-of-turn token: after its tool call
#: or its answer it goes on with markup of turns that are not its own (a tool response, closing
#: tags on a new line), so the model client stops it there.
STOP = ["</tool_call>", "<tool_response>", "</tool_response>", "\n</"]

#: Gemma 3 is not an OpenAI model, so AutoGen needs its capabilities spelled out.
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family="unknown",
    structured_output=False,
)

#: Worked examples: (question, expression the calculator gets, its result).
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


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. "(3 + 4) * 2"."""
    value = evaluate(expression)  # a bad expression raises; AutoGen reports it as the result
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def worked_examples() -> list[LLMMessage]:
    """The examples as the chat turns the agent itself produces: question, call, result, answer."""
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
            AssistantMessage(content=f"ANSWER: {result}", source=AGENT_NAME),
        ]
    return messages


def make_agent(model_client: OpenAIChatCompletionClient) -> AssistantAgent:
    """The assistant: the calculator tool, the worked examples, one reflection after the tool."""
    return AssistantAgent(
        AGENT_NAME,
        model_client=model_client,
        tools=[calculator],
        system_message=SYSTEM_MESSAGE,
        model_context=UnboundedChatCompletionContext(initial_messages=worked_examples()),
        reflect_on_tool_use=True,
    )


async def solve(model_client: OpenAIChatCompletionClient, question: str) -> str:
    """Run the agent on one problem; returns its final message's text."""
    result = await make_agent(model_client).run(task=question)
    return result.messages[-1].to_text()


@fulmen.rollout
async def math_agent(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Reward 1.0 when the agent's final answer equals the task's answer, else 0.0."""
    model_client = OpenAIChatCompletionClient(
        model=llm.model,
        base_url=llm.base_url,
        api_key=llm.api_key,
        model_info=MODEL_INFO,
        stop=STOP,
    )
    try:
        text = await solve(model_client, task["question"])
    finally:
        await model_client.close()
    return score(text, task["answer"])


def train_tasks() -> list[dict[str, Any]]:
    """512 generated training problems (none of them in the held-out pool)."""
    return make_tasks("train", 512)


def test_tasks() -> list[dict[str, Any]]:
    """64 held-out problems."""
    return make_tasks("test", 64)
