"""PPO's step rewards from an attempt's records: emitted per call, the final one on the last."""

from __future__ import annotations

from fulmen.algorithms.ppo.rewards import episodes, step_rewards
from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.transitions.credit import CreditInput
from tests.transitions.factories import call, reward_span

from ..builders import transition


def test_each_call_gets_its_emitted_reward_and_the_last_the_final_one() -> None:
    credits = step_rewards(CreditInput(1.0, (None, 0.25, -0.5, None)))
    assert [c.reward for c in credits] == [0.0, 0.25, -0.5, 1.0]
    assert all(c.weight == 1.0 for c in credits)


def test_the_last_calls_emitted_reward_is_not_counted_twice() -> None:
    # an agent that reports its outcome with emit_reward emits it for its last call
    assert [c.reward for c in step_rewards(CreditInput(0.75, (None, 0.75)))] == [0.0, 0.75]
    assert [c.reward for c in step_rewards(CreditInput(1.0, (0.5,)))] == [1.0]
    assert step_rewards(CreditInput(1.0, ())) == []


def test_episodes_are_rollouts_in_call_order() -> None:
    calls = [
        transition(None, "b", [1, 2], [3], 0.0, call_index=4),
        transition(None, "a", [1, 2], [3], 0.0, call_index=1),
        transition(None, "b", [1, 2], [3], 1.0, call_index=2),
        transition(None, "a", [1, 2], [3], 1.0, call_index=0),
    ]
    grouped = episodes(calls)
    assert [e.rollout_id for e in grouped] == ["b", "a"]
    assert [[t.call_index for t in e.calls] for e in grouped] == [[2, 4], [0, 1]]


def test_the_adapter_gives_each_call_its_step_reward() -> None:
    """Call records and reward spans through ``build_trajectory`` with PPO's credit."""
    calls, spans = [], []
    for k, emitted in enumerate((0.5, None, 0.25)):
        prompt = [1, 10 + k, 11 + k]
        calls.append(call(k + 1, prompt, [20 + k, 21], rollout_id="r"))
        if emitted is not None:
            spans.append(
                reward_span(10 + k, emitted, response_id=f"resp-r-{k + 1}", rollout_id="r")
            )
    spans.append(reward_span(20, 2.0, source="return", rollout_id="r"))
    trajectory = build_trajectory(
        rollout_id="r", calls=calls, spans=spans, options=TransitionOptions(), credit=step_rewards
    )
    assert [t.reward for t in trajectory.transitions] == [0.5, 0.0, 2.0]
    assert [t.call_index for t in trajectory.transitions] == [0, 1, 2]
