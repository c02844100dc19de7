"""Reading rewards and agent names back from stored spans (fulmen.transitions' entry points)."""

from __future__ import annotations

from typing import Any

from fulmen.tracing import semconv
from fulmen.types import Span


def span(seq: int, name: str, span_id: str, parent: str | None = None, **attrs: Any) -> Span:
    return Span(
        rollout_id="r",
        attempt_id="a",
        trace_id="t" * 32,
        span_id=span_id,
        parent_id=parent,
        name=name,
        attributes=attrs,
        start_time=0.0,
        sequence=seq,
    )


def reward(seq: int, values: dict[str, float], primary: str, source: str = "emit") -> Span:
    return span(
        seq,
        semconv.SPAN_REWARD,
        f"r{seq}",
        **{
            semconv.REWARD_NAMES: list(values),
            semconv.REWARD_VALUES: list(values.values()),
            semconv.REWARD_PRIMARY: primary,
            semconv.REWARD_SOURCE: source,
        },
    )


def test_later_rewards_win_by_sequence_not_by_list_order() -> None:
    spans = [
        reward(5, {"reward": 1.0}, "reward", "return"),
        reward(2, {"reward": 0.2, "format": 1.0}, "format"),
    ]
    assert semconv.rewards_from_spans(spans) == {"reward": 1.0, "format": 1.0}
    # the latest span (sequence 5) names "reward" primary
    assert semconv.primary_reward(spans) == 1.0
    events = semconv.reward_events(spans)
    assert [e.sequence for e in events] == [2, 5]
    assert events[1].source == "return"


def test_no_reward_and_malformed_reward_spans() -> None:
    bad = span(
        1, semconv.SPAN_REWARD, "x", **{semconv.REWARD_NAMES: ["a"], semconv.REWARD_VALUES: []}
    )
    assert semconv.rewards_from_spans([bad]) == {}
    assert semconv.primary_reward([bad]) is None


def test_agent_name_from_ancestors_and_langgraph_metadata() -> None:
    spans = [
        span(1, "AgentRun", "p", **{"agent.name": "researcher"}),
        span(2, "ChatCompletion", "c", "p", **{"output.value": '{"id": "resp-1"}'}),
        span(3, "node", "n", **{"metadata": '{"langgraph_node": "writer"}'}),
        span(4, "ChatOpenAI", "d", "n", **{semconv.RESPONSE_ID: "resp-2"}),
        span(5, "ChatOpenAI", "e", **{semconv.RESPONSE_ID: "resp-3"}),
        # a judge's per-call reward names the planner's response: it does not re-attribute it
        span(
            6,
            semconv.SPAN_REWARD,
            "j",
            **{semconv.RESPONSE_ID: "resp-1", semconv.AGENT_NAME: "judge"},
        ),
    ]
    assert semconv.agent_names_by_response_id(spans) == {"resp-1": "researcher", "resp-2": "writer"}
