"""Anchor-state credit (GiGPO's step level) pinned on small hand-computed groups."""

from __future__ import annotations

import math

import pytest

from fulmen.algorithms.grpo.anchors import anchor_advantages
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig, GRPOConfig
from fulmen.algorithms.grpo.samples import build_samples

from .builders import transition

S3 = math.sqrt(1 / 3)  # the sample std of {1, 0, 1}


def _three_rollouts() -> list:
    """Three rollouts of task t, two calls each; first calls share state A = [1, 2]."""
    rows = [
        ("r1", [1, 2], 1.0),
        ("r1", [1, 2, 3, 9], 1.0),  # state B1
        ("r2", [1, 2], 0.0),
        ("r2", [1, 2, 4, 9], 0.0),  # state B2: no other rollout was there
        ("r3", [1, 2], 1.0),
        ("r3", [1, 2, 3, 9], 1.0),  # state B1
    ]
    return [
        transition(None, r, prompt, [5], reward, call_index=i % 2)
        for i, (r, prompt, reward) in enumerate(rows)
    ]


def test_calls_from_the_same_state_are_compared_and_the_rest_get_zero() -> None:
    steps, stats = anchor_advantages(_three_rollouts())
    # State A: returns {1, 0, 1}, mean 2/3, sample std sqrt(1/3).
    assert steps[0] == pytest.approx((1 / 3) / S3, rel=1e-5)
    assert steps[2] == pytest.approx((-2 / 3) / S3, rel=1e-5)
    assert steps[4] == pytest.approx((1 / 3) / S3, rel=1e-5)
    # B1: two rollouts, equal returns: compared, and 0. B2: one rollout: no anchor, 0.
    assert steps[1] == steps[5] == 0.0 and steps[3] == 0.0
    assert (stats.anchor_calls, stats.anchor_groups) == (5, 2)
    plain, _ = anchor_advantages(_three_rollouts(), normalize_std=False)
    assert plain[0] == pytest.approx(1 / 3) and plain[2] == pytest.approx(-2 / 3, rel=1e-5)


def test_other_tasks_never_share_a_step_group() -> None:
    a = transition(None, "r1", [1, 2], [5], 1.0, task="t1")
    b = transition(None, "r2", [1, 2], [5], 0.0, task="t2")  # same tokens, another task
    steps, stats = anchor_advantages([a, b])
    assert steps == [0.0, 0.0] and stats.anchor_calls == 0


def test_equal_final_rewards_still_teach_which_step_was_better() -> None:
    """Both rollouts succeed, one in fewer calls: GRPO sees no signal, the anchor state does.

    Discounted credit (gamma 0.5) gives the shared first state returns 0.5 (two calls) and
    0.25 (three calls).
    """
    short = [
        transition(None, "r1", [1, 2], [5], 0.5, call_index=0, rollout_reward=1.0),
        transition(None, "r1", [1, 2, 5, 7], [6], 1.0, call_index=1, rollout_reward=1.0),
    ]
    long = [
        transition(None, "r2", [1, 2], [8], 0.25, call_index=0, rollout_reward=1.0),
        transition(None, "r2", [1, 2, 8, 7], [6], 0.5, call_index=1, rollout_reward=1.0),
        transition(None, "r2", [1, 2, 8, 7, 6, 7], [6], 1.0, call_index=2, rollout_reward=1.0),
    ]
    batch = short + long
    plain, _ = build_samples(batch, config=GRPOConfig())
    assert plain == []  # every rollout scored 1.0: no step
    samples, stats = build_samples(batch, config=GRPOConfig(anchor_weight=1.0))
    first_calls = {s.rollout: s.advantages[0] for s in samples if s.input_ids[:3] == [1, 2, 5]}
    assert stats.anchor_calls == 2 and stats.anchor_groups == 1
    # {0.5, 0.25}: mean 0.375, sample std 0.1768 -> +0.7071 for the shorter path.
    assert list(first_calls.values()) == [pytest.approx(1 / math.sqrt(2), rel=1e-5)]
    longer = [s for s in samples if s.input_ids[:3] == [1, 2, 8]]
    assert longer[0].advantages[0] == pytest.approx(-1 / math.sqrt(2), rel=1e-5)


def test_the_weight_scales_the_step_advantage_on_top_of_grpo() -> None:
    batch = _three_rollouts()
    base, _ = build_samples(batch, config=GRPOConfig())
    mixed, stats = build_samples(batch, config=GRPOConfig(anchor_weight=0.5))
    steps, _ = anchor_advantages(batch)
    assert stats.anchor_calls == 5
    for b, m, s in zip(base, mixed, steps, strict=True):
        assert m.advantages[0] == pytest.approx(b.advantages[0] + 0.5 * s, rel=1e-5)


def test_a_state_the_agent_names_groups_calls_whose_prompts_differ() -> None:
    """Prompts that differ in what does not matter (a timestamp) meet by the agent's own key."""
    a = transition(None, "r1", [1, 2, 7], [5], 1.0, state_key="room-3")
    b = transition(None, "r2", [1, 2, 8], [5], 0.0, state_key="room-3")
    c = transition(None, "r3", [1, 2, 7], [5], 1.0)  # unnamed: grouped by its tokens, alone
    steps, stats = anchor_advantages([a, b, c], normalize_std=False)
    assert steps == [0.5, -0.5, 0.0]
    assert (stats.anchor_calls, stats.anchor_groups) == (2, 1)


def test_merged_rollouts_only_repeat_the_rollout_level_so_the_config_refuses_them() -> None:
    """One merged sequence per rollout starts at the task's prompt: its step group is its group.

    The step advantages then equal the rollout-level ones (the advantage is scaled by 1 + ω and
    nothing is learned about steps), which is why ``anchor_weight`` with ``merge: true`` is
    refused rather than silently doing that.
    """
    merged = [
        transition(None, r, [1, 2], [5, 3, 9, 6], reward)
        for r, reward in (("r1", 1.0), ("r2", 0.0), ("r3", 1.0))
    ]
    base, _ = build_samples(merged, config=GRPOConfig())
    steps, stats = anchor_advantages(merged)
    assert (stats.anchor_calls, stats.anchor_groups) == (3, 1)
    assert steps == pytest.approx([s.advantages[0] for s in base], rel=1e-5)
    merge = {"transitions": {"merge": True}}
    with pytest.raises(ValueError, match=r"anchor_weight does not work with transitions\.merge"):
        GRPOAlgorithmConfig.model_validate({**merge, "grpo": {"anchor_weight": 1.0}})
    GRPOAlgorithmConfig.model_validate({**merge, "grpo": {"anchor_weight": 0.0}})
    GRPOAlgorithmConfig.model_validate({"grpo": {"anchor_weight": 1.0}})


def test_the_offline_batch_group_never_anchors_calls_of_different_tasks() -> None:
    """Issue 46, item 5: offline GRPO pools the rollouts of four unrelated tasks (one each,
    rewards 1, 1, 0, 0) in its batch group; their calls all name the state ``plan``. Anchor
    credit compared them as one step group and added +-0.866 to each call; now the batch
    group is a baseline only, and each call keeps its rollout-level advantage, +-0.866."""
    from fulmen.algorithms.grpo.offline import BATCH_GROUP, offline_batch
    from fulmen.types.transitions import Trajectory, TransitionDiagnostics

    trajectories = [
        Trajectory(
            rollout_id=f"s{i}",
            task_id=f"ticket-{i}",
            final_reward=reward,
            transitions=[
                transition(
                    None, f"s{i}", [1, 2, i], [5], reward, task=f"ticket-{i}", state_key="plan"
                )
            ],
            diagnostics=TransitionDiagnostics(calls=1, calls_used=1, rollouts=1),
        )
        for i, reward in enumerate((1.0, 1.0, 0.0, 0.0))
    ]
    batch = offline_batch(trajectories)
    assert {t.task_id for t in batch.transitions} == {BATCH_GROUP}
    steps, stats = anchor_advantages(batch.transitions)
    assert steps == [0.0] * 4 and (stats.anchor_calls, stats.anchor_groups) == (0, 0)
    samples, sample_stats = build_samples(batch.transitions, config=GRPOConfig(anchor_weight=1.0))
    assert sample_stats.anchor_calls == 0
    assert [s.advantages[0] for s in samples] == pytest.approx(
        [0.866, 0.866, -0.866, -0.866], abs=1e-3
    )
    # a task with two kept rollouts stays its own group, and its shared state still anchors
    pair = [
        transition(None, f"p{i}", [1, 2], [5], reward, task="refund", state_key="plan")
        for i, reward in enumerate((1.0, 0.0))
    ]
    steps, stats = anchor_advantages([*batch.transitions, *pair])
    assert steps[4:] == pytest.approx([0.7071, -0.7071], abs=1e-4) and stats.anchor_groups == 1
