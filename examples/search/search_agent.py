"""The search agent: an OpenAI Agents SDK ``Agent`` answers two-hop questions with a search tool.

The agent is plain Agents SDK code: an ``Agent`` named ``researcher`` with one
``@function_tool`` (full-text search over the generated encyclopedia, ``search_index``), run by
``Runner.run`` with a cap on its turns. A Gemma 3 270M *base* model cannot call tools from a
description alone, so the conversation opens with four worked examples as earlier turns: a
question, ``Search 1`` and ``Search 2`` with the tool's real results, and ``Answer: ...``. The
chat template renders them exactly as it renders the model's own turns, so the model continues
the pattern. The examples are chosen per question (dynamic few-shot): the solved questions
worded most like it, from a pool about the world's ``demo`` half.

``API`` picks the SDK's model class: ``"responses"`` (the SDK's default,
``OpenAIResponsesModel``, calling ``/v1/responses``) or ``"chat"``
(``OpenAIChatCompletionsModel``); a task may carry its own ``"api"``. Both train: the gateway
sends a Responses call to the engine as a chat completion and records its tokens.

The only fulmen-specific lines are ``@fulmen.rollout``, the client built from ``llm`` and the
returned reward (answer token F1, ``search_reward``; 0.0 when the agent runs out of turns).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from agents import (
    Agent,
    ModelBehaviorError,
    ModelSettings,
    OpenAIProvider,
    RunConfig,
    Runner,
    TResponseInputItem,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import MaxTurnsExceeded
from openai import AsyncOpenAI
from search_index import open_index
from search_reward import answer_f1, final_answer
from search_world import QUESTION_KINDS, make_questions

import fulmen

__all__ = [
    "API",
    "EXAMPLES_SHOWN",
    "INSTRUCTIONS",
    "MAX_TURNS",
    "STOP",
    "researcher",
    "search",
    "search_agent",
    "worked_examples",
]

set_tracing_disabled(True)  # the SDK would export its traces to OpenAI's hosted service

#: Which model class the SDK uses: its default Responses model, or Chat Completions.
API: Literal["responses", "chat"] = "responses"
#: Two searches and the answer, plus one spare turn.
MAX_TURNS = 4
TOP_K = 2
EXAMPLES_PER_KIND = 3
EXAMPLES_SHOWN = 4
#: Where a turn ends: a tool call's closing tag, or the answer's full stop. The base model does
#: not end its turns by itself (it never learned Gemma's end-of-turn token).
STOP = ["</tool_call>", "."]

INSTRUCTIONS = (
    "You answer questions about people, companies and cities from an encyclopedia. "
    "Call search with the name in the question, then call search with the name you found, "
    "then reply with Answer: and the answer only, ending with a full stop."
)


@function_tool
def search(query: str) -> str:
    """Search the encyclopedia and return the best matching passages.

    Args:
        query: A name or a few words to look up.
    """
    passages = open_index().search(query, k=TOP_K)
    return "\n".join(passages) if passages else "No results."


def _assistant_message(item_id: str, text: str) -> TResponseInputItem:
    """A model turn's text as the SDK records it (an output message, so a tool call joins it)."""
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _worked_example(index: int, task: dict[str, Any], subject: str) -> list[TResponseInputItem]:
    """One solved question as conversation items: two searches with real results, the answer."""
    items: list[TResponseInputItem] = [{"role": "user", "content": task["question"]}]
    for hop, query in enumerate((subject, task["hops"][0])):
        call_id = f"call_example{index}_{hop}"
        results = "\n".join(open_index().search(query, k=TOP_K))
        items += [
            _assistant_message(f"{call_id}_text", f"Search {hop + 1}"),
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "search",
                "arguments": json.dumps({"query": query}),
            },
            {"type": "function_call_output", "call_id": call_id, "output": results},
        ]
    items.append(_assistant_message(f"msg_example{index}", f"Answer: {task['answer']}."))
    return items


def _words(text: str) -> frozenset[str]:
    return frozenset(text.lower().rstrip("?").split())


def _subject(task: dict[str, Any]) -> str:
    """The entity a question names (the first hop's query)."""
    question: str = task["question"]
    for start, end in ((" of ", " born?"), (" where ", " works")):
        if start in question and end in question:
            return question.split(start, 1)[1].rsplit(end, 1)[0]
    raise ValueError(f"no subject in {question!r}")


def _example_tasks(per_kind: int = EXAMPLES_PER_KIND) -> list[dict[str, Any]]:
    """Questions about the ``demo`` half, kinds in turn, no two sharing an entity or answer.

    A question whose answer the first search already shows (a person born in the city where
    their employer is based) is left out: it would teach the model to answer after one search.
    """
    chosen: list[dict[str, Any]] = []
    used: set[str] = set()
    for _ in range(per_kind):
        for kind in QUESTION_KINDS:
            for task in make_questions("demo", 36):
                names = {_subject(task), task["hops"][0], task["answer"]}
                first = "\n".join(open_index().search(_subject(task), k=TOP_K))
                if task["kind"] == kind and not names & used and task["answer"] not in first:
                    chosen.append(task)
                    used |= names
                    break
    return chosen


#: Solved questions about the world's ``demo`` half: (question words, conversation items).
EXAMPLE_POOL: list[tuple[frozenset[str], list[TResponseInputItem]]] = [
    (_words(task["question"]), _worked_example(i, task, _subject(task)))
    for i, task in enumerate(_example_tasks())
]


def worked_examples(question: str, n: int = EXAMPLES_SHOWN) -> list[TResponseInputItem]:
    """The ``n`` solved questions worded most like ``question``, the most alike last.

    Dynamic few-shot: a question about a company's founder is shown solved questions about
    founders, so the model sees which passage to read at each hop.
    """
    words = _words(question)
    ranked = sorted(range(len(EXAMPLE_POOL)), key=lambda i: (len(words & EXAMPLE_POOL[i][0]), -i))
    return [item for i in ranked[-n:] for item in EXAMPLE_POOL[i][1]]


def researcher(model: str) -> Agent[Any]:
    """The agent: instructions, the search tool, the model name from ``llm``."""
    return Agent(
        name="researcher",
        instructions=INSTRUCTIONS,
        tools=[search],
        model=model,
        model_settings=ModelSettings(extra_body={"stop": STOP}),
    )


@fulmen.rollout
async def search_agent(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Answer ``task["question"]``; the reward is the answer's token F1 against the gold answer."""
    api = task.get("api", API)
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        provider = OpenAIProvider(openai_client=client, use_responses=api == "responses")
        question: TResponseInputItem = {"role": "user", "content": task["question"]}
        try:
            result = await Runner.run(
                researcher(llm.model),
                [*worked_examples(task["question"]), question],
                max_turns=MAX_TURNS,
                run_config=RunConfig(model_provider=provider),
            )
        except (MaxTurnsExceeded, ModelBehaviorError):
            return 0.0  # ran out of turns, or called a tool that does not exist
    return answer_f1(final_answer(str(result.final_output)), task["answer"])
