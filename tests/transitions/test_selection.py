"""Which calls are trained (``transitions.calls``), and lineages in merged mode."""

from __future__ import annotations

from typing import Any

from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.transitions.selection import CallSelection
from fulmen.types import LLMCall

from .factories import call, reward_span


def _with(record: LLMCall, *, model: str = "m", tools: bool = False, **headers: str) -> LLMCall:
    request: dict[str, Any] = {**record.request, "model": model}
    if tools:
        request["tools"] = [{"type": "function", "function": {"name": "bash"}}]
    return record.model_copy(update={"request": request, "client_headers": headers})


def _build(records: list[LLMCall], **opts: Any) -> Any:
    return build_trajectory(
        rollout_id="r1",
        attempt_id="r1-a1",
        calls=records,
        spans=[reward_span(99, 1.0)],
        options=TransitionOptions(**opts),
    )


def test_rules_on_model_headers_and_tools_leave_out_side_calls_and_count_them() -> None:
    main = _with(call(1, [1], [2]), model="claude-sonnet-4-6", tools=True, session="s1")
    title = _with(call(2, [3], [4]), model="claude-haiku-4-5", session="s1")
    sub = _with(call(3, [5], [6]), model="claude-sonnet-4-6", tools=True, session="s2")
    calls = [main, title, sub]
    assert len(_build(calls).transitions) == 3  # the default keeps every call
    by_model = _build(calls, calls=CallSelection(models=("claude-sonnet-*",)))
    assert [t.call_ids for t in by_model.transitions] == [["r1-call-1"], ["r1-call-3"]]
    assert by_model.diagnostics.skipped_selection == 1
    by_header = _build(calls, calls={"headers": {"Session": "s1"}})  # names are case-blind
    assert [t.call_ids for t in by_header.transitions] == [["r1-call-1"], ["r1-call-2"]]
    without_header = _with(call(4, [7], [8]))
    assert not CallSelection(headers={"session": "*"}).keeps(without_header)
    with_tools = _build(calls, calls={"tools": "with"})
    assert [t.call_ids[0] for t in with_tools.transitions] == ["r1-call-1", "r1-call-3"]
    without_tools = _build(calls, calls={"tools": "without"})
    assert [t.call_ids[0] for t in without_tools.transitions] == ["r1-call-2"]
    assert without_tools.diagnostics.skipped_selection == 2


def test_interleaved_lineages_of_one_agent_each_merge_into_their_own_sequence() -> None:
    calls = [
        call(1, [1, 2], [3]),  # the main loop
        call(2, [7, 8], [9]),  # a sub-agent (same agent name), started in between
        call(3, [1, 2, 3, 4], [5]),  # the main loop again: extends its own sequence
        call(4, [7, 8, 9, 6], [6]),  # the sub-agent again
    ]
    traj = _build(calls, merge=True)
    assert [t.call_ids for t in traj.transitions] == [
        ["r1-call-1", "r1-call-3"],
        ["r1-call-2", "r1-call-4"],
    ]
    assert traj.transitions[0].completion_token_ids == [3, 4, 5]
    assert traj.transitions[0].loss_mask == [1, 0, 1]
    assert traj.diagnostics.merges == 2
    assert traj.diagnostics.merge_splits == 1  # the sub-agent's first call extended nothing


def test_a_call_joins_the_longest_sequence_its_prompt_extends() -> None:
    calls = [
        call(1, [1], [2]),
        call(2, [1, 2, 3], [4]),  # extends the first
        call(3, [1, 2, 3, 4, 5], [6]),  # extends both the first's and the chain's tokens
    ]
    traj = _build(calls, merge=True)
    assert [t.call_ids for t in traj.transitions] == [["r1-call-1", "r1-call-2", "r1-call-3"]]


def test_merging_stops_at_a_reply_cut_by_max_tokens() -> None:
    calls = [
        call(1, [1, 2], [3, 3], finish_reason="length"),
        call(2, [1, 2, 3, 3, 4], [5]),  # extends a cut reply: a sequence of its own
        call(3, [1, 2, 3, 3, 4, 5, 6], [7]),  # extends the second: merged
    ]
    traj = _build(calls, merge=True)
    assert [t.call_ids for t in traj.transitions] == [
        ["r1-call-1"],
        ["r1-call-2", "r1-call-3"],
    ]
    assert traj.transitions[0].is_truncated and not traj.transitions[1].is_truncated
    d = traj.diagnostics
    assert (d.merges, d.merge_stops_truncated, d.merge_splits, d.truncated) == (1, 1, 0, 1)


def test_the_state_header_a_call_sent_becomes_its_transitions_state_key() -> None:
    named = _with(call(1, [1], [2]), **{"x-fulmen-state": "room-3"})
    traj = _build([named, call(2, [3], [4], messages=[{"role": "user", "content": "b"}])])
    assert [t.state_key for t in traj.transitions] == ["room-3", None]
