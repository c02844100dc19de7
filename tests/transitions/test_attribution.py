"""Agent names from the call records, and the warnings when agent selection cannot work."""

from __future__ import annotations

import logging

import pytest

from fulmen.transitions.attribution import AttributionCheck
from fulmen.transitions.signals import read_signals
from fulmen.transitions.trajectory import TransitionOptions, build_trajectory
from fulmen.types import LLMCall
from fulmen.types.transitions import TransitionDiagnostics
from tests.transitions.factories import agent_span, call, reward_span


def named(record: LLMCall, agent: str | None) -> LLMCall:
    return record.model_copy(update={"agent_name": agent})


def test_the_records_own_name_comes_first_and_spans_fill_the_rest() -> None:
    calls = [
        named(call(1, [1, 2], [3]), "planner"),
        call(2, [1, 2, 3], [4]),
        call(3, [5], [6]),
    ]
    spans = [
        agent_span(4, "from-span", "resp-r1-1"),
        agent_span(5, "answerer", "resp-r1-2"),
    ]
    assert read_signals(calls, spans).agent_names == ("planner", "answerer", None)


def test_agent_selection_trains_the_named_calls_only() -> None:
    calls = [named(call(1, [1], [2]), "actor"), named(call(2, [3], [4]), "critic")]
    trajectory = build_trajectory(
        rollout_id="r1",
        calls=calls,
        spans=[reward_span(3, 1.0, source="return")],
        options=TransitionOptions(agents=("actor",)),
    )
    assert [t.agent_name for t in trajectory.transitions] == ["actor"]
    assert trajectory.diagnostics.skipped_agent == 1
    assert trajectory.diagnostics.calls_unnamed == 0


def diagnostics_of(agents: list[str | None], patterns: tuple[str, ...]) -> TransitionDiagnostics:
    calls = [named(call(i + 1, [i], [i + 1]), a) for i, a in enumerate(agents)]
    return build_trajectory(
        rollout_id="r1",
        calls=calls,
        spans=[reward_span(len(calls) + 1, 1.0, source="return")],
        options=TransitionOptions(agents=patterns),
    ).diagnostics


def test_unnamed_calls_are_reported_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    options = TransitionOptions(agents=("actor",))
    check = AttributionCheck(options)
    step = [diagnostics_of(["actor", None, None], options.agents)]
    with caplog.at_level(logging.WARNING, logger="fulmen.transitions"):
        first = check.check(1, step)
        second = check.check(2, step)
    assert len(first) == 1 and second == []
    assert "2 of 3 token-level LLM calls in step 1 carry no agent name" in first[0]
    assert "as_agent" in first[0]
    assert [r.getMessage() for r in caplog.records] == first


def test_a_step_that_selects_nothing_warns_every_time() -> None:
    options = TransitionOptions(agents=("actor",))
    check = AttributionCheck(options)
    step = [diagnostics_of(["planner"], options.agents), diagnostics_of(["critic"], options.agents)]
    for number in (1, 2):
        (warning,) = check.check(number, step)
        assert f"agent selection ['actor'] matched no call in step {number}" in warning
        assert "2 token-level calls were skipped by name" in warning


def test_no_warning_when_every_agent_is_selected() -> None:
    check = AttributionCheck(TransitionOptions())
    assert check.check(1, [diagnostics_of([None, None], ("*",))]) == []
