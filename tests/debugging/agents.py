"""Agents for the debugging tests: variants of the toy example's agents.

``changed_two_calls`` makes the same first call as ``toy_two_calls`` and a different second
one, so a replay of a ``toy_two_calls`` rollout must diverge at call #2.
``streaming_toy`` is ``toy_agent`` with a streamed reply, so replay serves server-sent events.
``failing_tool`` fails after its call, so a failed run can be replayed.
``tool_agent`` calls the model with a tool, runs the tool call it gets and asks again (its
second call streamed when the task says ``stream``).
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

import fulmen

MAX_TOKENS = 8


def _score(text: str) -> float:
    return min(1.0, text.count("a") / MAX_TOKENS)


async def _ask(llm: fulmen.LLM, prompt: str) -> str:
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        response = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=MAX_TOKENS,
        )
    finally:
        await client.close()
    return response.choices[0].message.content or ""


@fulmen.rollout
async def changed_two_calls(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Like the toy ``toy_two_calls``, but the actor's request words its plan differently."""
    with fulmen.as_agent("planner"):
        plan = await _ask(llm, f"Plan how to answer: {task['prompt']}")
    with fulmen.as_agent("actor"):
        answer = await _ask(llm, f"{task['prompt']} Your plan was: {plan[:40]}")
    return _score(answer)


@fulmen.rollout
async def failing_tool(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Asks the model, then a "tool" fails on what it answered: a run that fails every time."""
    answer = await _ask(llm, task["prompt"])
    raise RuntimeError(f"tool failed on {answer[:3]!r}")


@fulmen.rollout
async def streaming_toy(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """The toy agent's one call, streamed; the reward is the same letter count."""
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        stream = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": task["prompt"]}],
            max_tokens=MAX_TOKENS,
            stream=True,
        )
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    finally:
        await client.close()
    return _score("".join(parts))


def strict_reward(rollout: Any) -> float:
    """A stricter toy reward for rescore: 1.0 only when every character is an ``a``."""
    text = rollout.final_text
    return 1.0 if text and set(text) == {"a"} else 0.0


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


async def _tool_call(client: AsyncOpenAI, model: str, messages: Any, *, stream: bool) -> Any:
    """The one tool call the model makes, as ``(id, name, arguments)``; streamed or not."""
    if not stream:
        reply = await client.chat.completions.create(
            model=model, messages=messages, tools=[ADD_TOOL]
        )
        [call] = reply.choices[0].message.tool_calls or []
        return call.id, call.function.name, call.function.arguments  # type: ignore[union-attr]
    parts: dict[int, list[str]] = {}
    chunks = await client.chat.completions.create(
        model=model, messages=messages, tools=[ADD_TOOL], stream=True
    )
    async for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            part = parts.setdefault(delta.index, ["", "", ""])
            function = delta.function
            part[0] = delta.id or part[0]
            part[1] += (function.name or "") if function else ""
            part[2] += (function.arguments or "") if function else ""
    [(call_id, name, arguments)] = parts.values()
    return call_id, name, arguments


async def _tool_round(llm: fulmen.LLM, question: str, *, stream: bool) -> str:
    """Ask with the ``add`` tool, run the tool call the model makes, ask again; the answer."""
    import json

    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    messages: list[Any] = [{"role": "user", "content": question}]
    try:
        call_id, name, arguments = await _tool_call(client, llm.model, messages, stream=stream)
        args = json.loads(arguments)
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": str(args["a"] + args["b"])},
        ]
        if not stream:
            second = await client.chat.completions.create(model=llm.model, messages=messages)
            return second.choices[0].message.content or ""
        chunks = await client.chat.completions.create(
            model=llm.model, messages=messages, stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    finally:
        await client.close()


@fulmen.rollout
async def tool_agent(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Adds two numbers with the ``add`` tool; 1.0 when the answer names the sum."""
    answer = await _tool_round(llm, task["question"], stream=task.get("stream", False))
    return 1.0 if str(task["a"] + task["b"]) in answer else 0.0
