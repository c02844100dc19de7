"""Pair building on hand-made groups: best against worst, call by call, with the margin rule."""

from __future__ import annotations

from fulmen.algorithms.dpo.pairs import build_pairs
from fulmen.types import Trajectory

from ..builders import transition

PROMPT = [1, 5, 6]


def _rollout(
    rid: str,
    reward: float,
    completions: list[list[int]],
    *,
    task: str | None = "t",
    prompts: list[list[int]] | None = None,
) -> Trajectory:
    prompts = prompts or [[*PROMPT, 10 + k] for k in range(len(completions))]
    transitions = [
        transition(None, rid, prompt, completion, reward, task=task, call_index=k)
        for k, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
    ]
    return Trajectory(rollout_id=rid, task_id=task, final_reward=reward, transitions=transitions)


def test_best_rollout_is_paired_with_the_worst_at_each_call_position() -> None:
    group = [
        _rollout("r0", 0.2, [[30], [31]]),
        _rollout("r1", 1.0, [[40], [41]]),  # best (first of the two 1.0s)
        _rollout("r2", 0.0, [[50], [51]]),  # worst
        _rollout("r3", 1.0, [[60], [61]]),
    ]
    pairs, stats = build_pairs(group, min_margin=0.5)
    assert [(p.chosen_rollout, p.rejected_rollout, p.position) for p in pairs] == [
        ("r1", "r2", 0),
        ("r1", "r2", 1),
    ]
    assert [(p.chosen, p.rejected) for p in pairs] == [([40], [50]), ([41], [51])]
    assert pairs[1].prompt == [*PROMPT, 11]
    assert (pairs[0].chosen_reward, pairs[0].rejected_reward) == (1.0, 0.0)
    assert (stats.groups, stats.groups_with_pair, stats.pairs) == (1, 1, 2)
    assert stats.groups_without_pair == 0


def test_the_last_of_equal_worst_rollouts_is_rejected() -> None:
    group = [_rollout("a", 0.0, [[3]]), _rollout("b", 1.0, [[4]]), _rollout("c", 0.0, [[5]])]
    pairs, _ = build_pairs(group, min_margin=0.5)
    assert [(p.chosen_rollout, p.rejected_rollout) for p in pairs] == [("b", "c")]


def test_a_group_needs_the_margin_and_equal_rewards_give_no_pair() -> None:
    below = [_rollout("a", 0.75, [[3]], task="x"), _rollout("b", 0.5, [[4]], task="x")]
    at = [_rollout("c", 0.75, [[3]], task="y"), _rollout("d", 0.25, [[4]], task="y")]
    equal = [_rollout("e", 1.0, [[3]], task="z"), _rollout("f", 1.0, [[4]], task="z")]
    single = [_rollout("g", 1.0, [[3]], task="w")]
    pairs, stats = build_pairs([*below, *at, *equal, *single], min_margin=0.5)
    assert [(p.chosen_rollout, p.rejected_rollout) for p in pairs] == [("c", "d")]
    assert stats.groups == 4
    assert stats.groups_with_pair == 1
    assert stats.groups_without_pair == 3
    assert (stats.groups_below_margin, stats.groups_equal_reward, stats.groups_single) == (1, 1, 1)
    metrics = stats.as_metrics()
    assert metrics["dpo/groups_without_pair"] == 3.0
    assert metrics["dpo/pairs"] == 1.0
    # a lower margin pairs the first group too; equal rewards never pair
    pairs, stats = build_pairs([*below, *equal], min_margin=0.0)
    assert [(p.chosen_rollout, p.rejected_rollout) for p in pairs] == [("a", "b")]
    assert stats.groups_equal_reward == 1


def test_different_prompts_are_skipped_and_counted() -> None:
    best = _rollout("w", 1.0, [[3], [4], [5]], prompts=[PROMPT, [*PROMPT, 9], [*PROMPT, 7]])
    worst = _rollout("l", 0.0, [[6], [7]], prompts=[PROMPT, [*PROMPT, 8]])
    pairs, stats = build_pairs([best, worst], min_margin=0.5)
    assert [p.position for p in pairs] == [0]
    assert stats.prompt_mismatch == 1  # position 1: the observations differed
    assert stats.unmatched_calls == 1  # position 2: only the best rollout made a third call
    assert stats.groups_with_pair == 1


def test_identical_completions_and_rollouts_without_calls_give_no_pair() -> None:
    same = [_rollout("a", 1.0, [[3, 4]]), _rollout("b", 0.0, [[3, 4]])]
    no_calls = Trajectory(rollout_id="c", task_id="t", final_reward=0.0, transitions=[])
    pairs, stats = build_pairs([*same, no_calls], min_margin=0.5)
    assert pairs == []
    assert stats.identical_completions == 1
    assert stats.groups == 1  # the rollout without transitions takes no part
    assert stats.groups_without_pair == 1


def test_rollouts_without_a_task_are_groups_of_their_own() -> None:
    alone = [_rollout("a", 1.0, [[3]], task=None), _rollout("b", 0.0, [[4]], task=None)]
    pairs, stats = build_pairs(alone, min_margin=0.5)
    assert pairs == []
    assert (stats.groups, stats.groups_single) == (2, 2)


def test_only_generated_tokens_are_trained() -> None:
    # a merged chain: the observation token 99 between two calls is masked out
    best = transition(None, "w", PROMPT, [3, 99, 4], 1.0, loss_mask=[1, 0, 1])
    worst = transition(None, "l", PROMPT, [5, 6], 0.0)
    trajectories = [
        Trajectory(rollout_id="w", task_id="t", final_reward=1.0, transitions=[best]),
        Trajectory(rollout_id="l", task_id="t", final_reward=0.0, transitions=[worst]),
    ]
    (pair,), _ = build_pairs(trajectories, min_margin=0.5)
    (chosen, chosen_at), (rejected, rejected_at) = pair.sequences()
    assert chosen == [*PROMPT, 3, 99, 4] and chosen_at == [3, 5]
    assert rejected == [*PROMPT, 5, 6] and rejected_at == [3, 4]
