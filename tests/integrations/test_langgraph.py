"""LangGraph with two LLM nodes (LangChain's ChatOpenAI), unchanged, pointed at the gateway."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from pydantic import SecretStr

from fulmen.agent.api import rollout
from fulmen.agent.context import LLM
from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions
from fulmen.types import Span
from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply, encode
from tests.integrations.through_runner import (
    agent_names,
    assert_reward,
    assert_token_level,
    instrumentation,
    run_one,
)


class State(TypedDict, total=False):
    question: str
    plan: str
    answer: str


def build_graph(llm: ChatOpenAI):  # the agent's own code: nothing fulmen-specific
    async def planner(state: State) -> State:
        out = await llm.ainvoke([("system", "Plan briefly."), ("user", state["question"])])
        return {"plan": str(out.content)}

    async def answerer(state: State) -> State:
        out = await llm.ainvoke(
            [("system", f"Follow the plan: {state['plan']}"), ("user", state["question"])]
        )
        return {"answer": str(out.content)}

    graph = StateGraph(State)
    graph.add_node("planner", planner)
    graph.add_node("answerer", answerer)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "answerer")
    graph.add_edge("answerer", END)
    return graph.compile()


async def test_two_llm_nodes_are_captured_with_token_ids(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(content="add the numbers"), Reply(content="4")])
    llm = ChatOpenAI(model="tiny-model", base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    result = await build_graph(llm).ainvoke({"question": "What is 2+2?"})
    assert result["answer"] == "4"
    calls = await gw.calls(rollout_id)
    assert len(calls) == 2
    assert [c.choices[0].text for c in calls] == ["add the numbers", "4"]
    for call, text in zip(calls, ["add the numbers", "4"], strict=True):
        assert call.is_token_level and call.attempt_id == attempt_id
        assert call.choices[0].token_ids == encode(text)
        assert call.choices[0].logprobs and len(call.choices[0].logprobs) == len(text)
        assert call.prompt_token_ids
    assert "add the numbers" in calls[1].request["messages"][0]["content"]


async def test_streaming_chat_model_is_captured(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="streamed through langchain"))
    llm = ChatOpenAI(
        model="tiny-model",
        base_url=gw.base_url(rollout_id, attempt_id),
        api_key="x",
        streaming=True,
    )
    parts = [chunk.content async for chunk in llm.astream("Say something")]
    assert "".join(str(p) for p in parts) == "streamed through langchain"
    (call,) = await gw.calls(rollout_id)
    assert call.is_stream and call.is_token_level
    assert call.choices[0].token_ids == encode("streamed through langchain")


@rollout
async def graph_rollout(task: dict[str, Any], llm: LLM) -> float:
    """The graph as a fulmen rollout: its reward is whether the answer is right."""
    chat = ChatOpenAI(model=llm.model, base_url=llm.base_url, api_key=SecretStr(llm.api_key))
    result = await build_graph(chat).ainvoke({"question": task["question"]})
    return 1.0 if result["answer"] == task["expected"] else 0.0


async def run_graph(gw: Running, instrumented: bool) -> AttemptRecords:
    frameworks = instrumentation("langchain", instrumented)
    gw.script.replies.extend([Reply(content="add the numbers"), Reply(content="4")])
    task = {"question": "What is 2+2?", "expected": "4"}
    records = await run_one(gw, graph_rollout, frameworks, task)
    assert_token_level(records, ["add the numbers", "4"])
    assert_reward(records, 1.0)
    return records


def node_and_response_of_llm_spans(spans: Sequence[Span]) -> list[tuple[str, str]]:
    """(LangGraph node, response id) of each OpenInference LLM span, in store order."""
    out: list[tuple[str, str]] = []
    for span in sorted(spans, key=lambda s: s.sequence):
        if span.attributes.get("openinference.span.kind") != "LLM":
            continue
        metadata = json.loads(str(span.attributes["metadata"]))
        output = json.loads(str(span.attributes["output.value"]))
        out.append((metadata["langgraph_node"], output["llm_output"]["id"]))
    return out


async def test_graph_through_the_runner_plain_names_calls_by_node(gw: Running) -> None:
    # No instrumentation package: the node names travel on the requests themselves.
    records = await run_graph(gw, instrumented=False)
    assert [c.agent_name for c in records.calls] == ["planner", "answerer"]
    assert agent_names(records) == ["planner", "answerer"]
    trajectory = records.trajectory(options=TransitionOptions(agents=("answerer",)))
    (transition,) = trajectory.transitions
    assert transition.agent_name == "answerer" and transition.call_ids == [records.calls[1].call_id]
    assert transition.completion_token_ids == encode("4")
    assert trajectory.diagnostics.skipped_agent == 1


async def test_graph_through_the_runner_instrumented(gw: Running) -> None:
    records = await run_graph(gw, instrumented=True)
    # The stored spans hold what attribution needs: each call's node and its response id.
    responses = [c.response_id for c in records.calls]
    assert node_and_response_of_llm_spans(records.spans) == list(
        zip(["planner", "answerer"], responses, strict=True)
    )


async def test_graph_calls_are_attributed_to_their_nodes(gw: Running) -> None:
    records = await run_graph(gw, instrumented=True)
    assert agent_names(records) == ["planner", "answerer"]


def build_sync_graph(llm: ChatOpenAI):  # the same graph with sync nodes
    def planner(state: State) -> State:
        return {"plan": str(llm.invoke([("user", state["question"])]).content)}

    def answerer(state: State) -> State:
        out = llm.invoke([("system", f"Plan: {state['plan']}"), ("user", state["question"])])
        return {"answer": str(out.content)}

    graph = StateGraph(State)
    graph.add_node("planner", planner)
    graph.add_node("answerer", answerer)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "answerer")
    graph.add_edge("answerer", END)
    return graph.compile()


@rollout
def sync_graph_rollout(task: dict[str, Any], llm: LLM) -> float:
    """The sync graph as a fulmen rollout (LangGraph runs its nodes in a thread pool)."""
    chat = ChatOpenAI(model=llm.model, base_url=llm.base_url, api_key=SecretStr(llm.api_key))
    result = build_sync_graph(chat).invoke({"question": task["question"]})
    return 1.0 if result["answer"] == task["expected"] else 0.0


@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_sync_graph_names_calls_by_node(gw: Running, isolation: str) -> None:
    gw.script.replies.extend([Reply(content="add the numbers"), Reply(content="4")])
    task = {"question": "What is 2+2?", "expected": "4"}
    records = await run_one(gw, sync_graph_rollout, [], task, sync_isolation=isolation)
    assert_token_level(records, ["add the numbers", "4"])
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["planner", "answerer"]
