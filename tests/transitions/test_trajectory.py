from __future__ import annotations

import pytest

from fulmen.errors import ConfigError
from fulmen.store.memory import MemoryStore
from fulmen.transitions import TransitionOptions, build_trajectory, load_trajectory
from fulmen.transitions.credit import per_call_credit
from fulmen.types import LLMCallCreate, RolloutCreate, SpanCreate

from .factories import agent_span, call, reward_span


def _build(calls, spans, **opts):
    return build_trajectory(
        rollout_id="r1",
        attempt_id="r1-a1",
        task_id="task",
        calls=calls,
        spans=spans,
        options=TransitionOptions(**opts),
    )


def test_per_call_transitions_carry_tokens_logprobs_and_final_reward() -> None:
    calls = [
        call(1, [1, 2], [3, 4], logprobs=[-0.1, -0.2]),
        call(3, [1, 2, 3, 4, 9], [5], logprobs=[-0.3]),
    ]
    spans = [agent_span(2, "solver", "resp-r1-1"), reward_span(4, 0.75, source="return")]
    traj = _build(calls, spans)
    assert traj.final_reward == 0.75
    assert [t.call_index for t in traj.transitions] == [0, 1]
    first, second = traj.transitions
    assert first.prompt_token_ids == [1, 2] and first.completion_token_ids == [3, 4]
    assert first.logprobs == [-0.1, -0.2] and first.loss_mask == [1, 1]
    assert first.agent_name == "solver" and second.agent_name is None
    assert (first.reward, first.rollout_reward, first.task_id) == (0.75, 0.75, "task")
    assert second.call_ids == ["r1-call-3"] and second.credit_weights == [1.0]
    assert traj.diagnostics.calls_used == 2 and traj.diagnostics.merge_splits == 0


def test_calls_are_ordered_by_store_sequence() -> None:
    calls = [call(5, [1], [2]), call(2, [1], [3])]
    traj = _build(calls, [reward_span(9, 1.0)])
    assert [t.completion_token_ids for t in traj.transitions] == [[3], [2]]


def test_merged_sequence_masks_observations_and_keeps_credit_per_call() -> None:
    calls = [
        call(1, [1, 2, 3], [4, 5], logprobs=[-1.0, -2.0]),
        call(2, [1, 2, 3, 4, 5, 9, 9], [6], logprobs=[-3.0]),
        call(3, [1, 2, 3, 4, 5, 9, 9, 6, 8], [7, 7], logprobs=[-4.0, -5.0], finish_reason="length"),
    ]
    traj = _build(calls, [reward_span(4, 1.0)], merge=True, credit="discounted", gamma=0.5)
    (t,) = traj.transitions
    assert t.prompt_token_ids == [1, 2, 3]
    assert t.completion_token_ids == [4, 5, 9, 9, 6, 8, 7, 7]
    assert t.loss_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert t.logprobs == [-1.0, -2.0, 0.0, 0.0, -3.0, 0.0, -4.0, -5.0]
    assert t.credit_weights == [0.25, 0.25, 0.0, 0.0, 0.5, 0.0, 1.0, 1.0]
    assert t.call_ids == ["r1-call-1", "r1-call-2", "r1-call-3"]
    assert t.reward == 1.0 and t.is_truncated
    assert t.num_trained_tokens == 5
    assert (traj.diagnostics.merges, traj.diagnostics.merge_splits) == (2, 0)


def test_merge_splits_when_the_prompt_does_not_extend_token_exactly() -> None:
    calls = [
        call(1, [1, 2, 3], [4, 5]),
        call(2, [1, 2, 3, 4, 6, 9], [7]),  # history re-tokenized: 5 became 6
        call(3, [1, 2, 3, 4, 6, 9, 7, 8], [2]),
    ]
    traj = _build(calls, [reward_span(4, 1.0)], merge=True)
    assert [t.call_ids for t in traj.transitions] == [
        ["r1-call-1"],
        ["r1-call-2", "r1-call-3"],
    ]
    assert traj.transitions[1].loss_mask == [1, 0, 1]
    assert (traj.diagnostics.merges, traj.diagnostics.merge_splits) == (1, 1)


def test_merge_chains_per_agent() -> None:
    calls = [
        call(1, [1, 2], [3]),  # planner
        call(2, [5, 6], [7]),  # critic
        call(3, [1, 2, 3, 7], [8]),  # planner again, saw the critic's answer
    ]
    spans = [
        agent_span(10, "planner", "resp-r1-1"),
        agent_span(11, "critic", "resp-r1-2"),
        agent_span(12, "planner", "resp-r1-3"),
        reward_span(13, 1.0),
    ]
    traj = _build(calls, spans, merge=True)
    by_agent = {t.agent_name: t for t in traj.transitions}
    assert by_agent["planner"].completion_token_ids == [3, 7, 8]
    assert by_agent["planner"].loss_mask == [1, 0, 1]
    assert by_agent["critic"].completion_token_ids == [7]
    assert [t.call_index for t in traj.transitions] == [0, 1]
    assert traj.diagnostics.merge_splits == 0


def test_agent_patterns_select_calls_and_count_the_rest() -> None:
    calls = [call(1, [1], [2]), call(2, [1], [3]), call(3, [1], [4]), call(4, [1], [5])]
    spans = [
        agent_span(10, "solver-1", "resp-r1-1"),
        agent_span(11, "critic", "resp-r1-2"),
        agent_span(12, "solver-2", "resp-r1-3"),
        reward_span(13, 1.0),
    ]
    traj = _build(calls, spans, agents=("solver*",))
    assert [t.agent_name for t in traj.transitions] == ["solver-1", "solver-2"]
    assert traj.diagnostics.skipped_agent == 2  # the critic and the unnamed call
    everything = _build(calls, spans)
    assert len(everything.transitions) == 4


def test_calls_without_token_ids_are_skipped_and_counted() -> None:
    calls = [call(1, [1], [2], token_level=False), call(2, [1], [3]), call(3, [1], [])]
    traj = _build(calls, [reward_span(4, 1.0)])
    assert [t.call_index for t in traj.transitions] == [1]
    assert traj.diagnostics.skipped_not_token_level == 1
    assert traj.diagnostics.skipped_empty == 1


def test_per_call_rewards_join_by_response_id_then_by_order() -> None:
    calls = [call(1, [1], [2]), call(3, [1], [3]), call(5, [1], [4])]
    spans = [
        reward_span(2, 0.5),  # after call 1 in store order
        reward_span(9, 0.25, response_id="resp-r1-3"),  # late export, named call
        reward_span(10, 1.0, source="return"),  # the final reward, not a per-call one
    ]
    traj = _build(calls, spans, credit="per_call")
    assert [t.reward for t in traj.transitions] == [0.5, 0.25, 0.0]
    assert traj.final_reward == 1.0
    assert all(t.rollout_reward == 1.0 for t in traj.transitions)


def test_per_call_reward_with_agent_goes_to_that_agents_latest_call() -> None:
    calls = [call(1, [1], [2]), call(2, [1], [3])]
    spans = [
        agent_span(10, "a", "resp-r1-1"),
        agent_span(11, "b", "resp-r1-2"),
        reward_span(3, 2.0, agent="a"),
    ]
    traj = _build(calls, spans, credit="per_call", missing_reward=0.0)
    assert [t.reward for t in traj.transitions] == [2.0, 0.0]


def test_attempt_without_reward_is_skipped_or_defaulted() -> None:
    calls = [call(1, [1], [2])]
    skipped = _build(calls, [])
    assert skipped.transitions == [] and skipped.final_reward is None
    assert skipped.diagnostics.rollouts_without_reward == 1
    defaulted = _build(calls, [], missing_reward=0.0)
    assert [t.reward for t in defaulted.transitions] == [0.0]


def test_last_strategy_in_per_call_mode_gives_zero_weights_before_the_last() -> None:
    calls = [call(1, [1], [2, 2]), call(2, [1], [3])]
    traj = _build(calls, [reward_span(3, 1.0)], credit="last")
    assert [t.credit_weights for t in traj.transitions] == [[0.0, 0.0], [1.0]]
    assert [t.reward for t in traj.transitions] == [0.0, 1.0]


def test_diagnostics_add_up() -> None:
    a = _build([call(1, [1], [2])], [reward_span(2, 1.0)]).diagnostics
    b = _build([call(1, [1], [2], token_level=False)], [reward_span(2, 1.0)]).diagnostics
    total = a + b
    assert (total.calls, total.rollouts, total.skipped_not_token_level) == (2, 2, 1)


async def test_load_trajectory_reads_a_real_store() -> None:
    store = await MemoryStore.connect(watchdog_interval=None)
    try:
        (rollout,) = await store.enqueue([RolloutCreate(input={"q": 1}, task_id="t7")])
        (claim,) = await store.claim("w1")
        rid, aid = rollout.rollout_id, claim.attempt.attempt_id
        records = [
            call(i, [1, 2], [3, i], rollout_id=rid) for i in range(1, 4)
        ]  # sequences are reassigned by the store
        await store.add_llm_calls(
            [
                LLMCallCreate(**c.model_dump(exclude={"sequence"}) | {"attempt_id": aid})
                for c in records
            ]
        )
        reward = reward_span(99, 0.5, source="return", rollout_id=rid)
        await store.add_spans(
            [SpanCreate(**reward.model_dump(exclude={"sequence"}) | {"attempt_id": aid})]
        )
        traj = await load_trajectory(store, rid)
        assert traj.attempt_id == aid and traj.task_id == "t7"
        assert [t.completion_token_ids for t in traj.transitions] == [[3, 1], [3, 2], [3, 3]]
        assert all(t.reward == 0.5 for t in traj.transitions)
    finally:
        await store.aclose()


def test_names_call_attributes_a_call_by_its_header_alone() -> None:
    # A call that carried no x-fulmen-agent header was served by the default policy (the
    # gateway routes by that header); its spans naming "writer" must not put it into the
    # writer's adapter. With names: call only the header counts.
    named = call(1, [1, 2], [3]).model_copy(update={"agent_name": "writer"})
    unnamed = call(3, [1, 2, 3, 9], [5], response_id="resp-r1-3")
    spans = [agent_span(2, "writer", "resp-r1-3"), reward_span(4, 1.0, source="return")]
    loose = _build([named, unnamed], spans)
    assert [t.agent_name for t in loose.transitions] == ["writer", "writer"]
    strict = _build([named, unnamed], spans, agents=("writer",), names="call")
    assert [t.call_ids for t in strict.transitions] == [["r1-call-1"]]
    assert strict.diagnostics.calls_unnamed == 1 and strict.diagnostics.skipped_agent == 1


def _three_rewarded_calls() -> tuple[list, list]:
    """Three calls, a reward emitted after each one (0.25, 1.0, 0.5), then the final 1.0."""
    calls = [call(1, [1], [2]), call(3, [1, 2, 9], [3]), call(5, [1, 2, 9, 3, 9], [4])]
    spans = [
        reward_span(2, 0.25),
        reward_span(4, 1.0, response_id="resp-r1-3"),
        reward_span(6, 0.5),
        reward_span(7, 1.0, source="return"),
    ]
    return calls, spans


def test_an_excluded_call_keeps_its_own_reward_and_is_not_trained() -> None:
    """Issue 46, item 2: removing a call before rewards are read moved its reward (1.0) onto
    the call before it (0.25 + 1.0); excluding it keeps every reward on its own call."""
    calls, spans = _three_rewarded_calls()
    removed = _build([calls[0], calls[2]], spans, credit="per_call")  # the old offline path
    assert [t.reward for t in removed.transitions] == [1.25, 0.5]
    kept = build_trajectory(
        rollout_id="r1",
        calls=calls,
        spans=spans,
        options=TransitionOptions(credit="per_call"),
        exclude={"r1-call-3"},
    )
    assert [(t.call_ids, t.reward) for t in kept.transitions] == [
        (["r1-call-1"], 0.25),
        (["r1-call-5"], 0.5),
    ]
    assert (kept.diagnostics.calls, kept.diagnostics.calls_used) == (3, 2)
    # merged: the excluded call's tokens are observation, masked out like a tool result
    merged = build_trajectory(
        rollout_id="r1",
        calls=calls,
        spans=spans,
        options=TransitionOptions(merge=True),
        exclude={"r1-call-3"},
    )
    (t,) = merged.transitions
    assert t.call_ids == ["r1-call-1", "r1-call-5"]
    assert (t.completion_token_ids, t.loss_mask) == ([2, 9, 3, 9, 4], [1, 0, 0, 0, 1])


def test_per_call_credit_on_merged_sequences_is_refused_by_the_adapter_itself() -> None:
    """Issue 46, item 7: a merged sequence carries its last call's reward only; called
    directly, transition building trained 0.5 for calls whose emitted rewards sum to 1.75."""
    calls, spans = _three_rewarded_calls()
    with pytest.raises(ValueError, match="'per_call' does not work with merge: true"):
        TransitionOptions(credit="per_call", merge=True)
    with pytest.raises(ConfigError, match="does not work with merge: true"):
        build_trajectory(
            rollout_id="r1",
            calls=calls,
            spans=spans,
            options=TransitionOptions(merge=True),
            credit=per_call_credit,
        )
    per_call = _build(calls, spans, credit="per_call")
    assert [t.reward for t in per_call.transitions] == [0.25, 1.0, 0.5]
