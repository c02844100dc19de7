"""Property-based tests over the advantage estimators, the credit strategies and the sample
builder (issue 27), and over per-role and offline batches built from call records (issue 46).

Batches are groups of rollouts of 1..6 calls each, credited by a built-in strategy (as the
adapter does, per call or merged into one chain), then turned into samples by ``build_samples``.
Every run draws the same examples (``derandomize``, no example database), so CI never flakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.advantages import (
    group_advantages,
    rollout_advantages,
    transition_advantages,
)
from fulmen.algorithms.grpo.anchors import anchor_advantages
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig
from fulmen.algorithms.grpo.offline import BATCH_GROUP, offline_batch
from fulmen.algorithms.grpo.roles import role_of, split_by_role
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.errors import ConfigError
from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.transitions.credit import CreditInput, assign_credit, resolve_credit
from fulmen.types import LLMCall, Span
from fulmen.types.transitions import Trajectory, Transition
from tests.transitions.factories import call, reward_span

from .builders import transition

PROPERTY = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CREDITS = ("final", "discounted", "last", "per_call")
ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "rollout": rollout_advantages,
    "transition": transition_advantages,
}


@dataclass(frozen=True)
class Rollout:
    """One rollout: its group, final reward and the reward emitted for each call."""

    rollout_id: str
    task: str
    reward: float
    emitted: tuple[float | None, ...]


@dataclass(frozen=True)
class Batch:
    """Rollouts plus how they are credited and estimated."""

    rollouts: tuple[Rollout, ...]
    credit: str
    gamma: float
    merge: bool
    advantage: str

    def scaled(self, c: float) -> Batch:
        """The same batch with every reward (final and emitted) times ``c``."""
        rollouts = tuple(
            replace(
                r,
                reward=r.reward * c,
                emitted=tuple(None if e is None else e * c for e in r.emitted),
            )
            for r in self.rollouts
        )
        return replace(self, rollouts=rollouts)

    def transitions(self) -> list[Transition]:
        options = {"gamma": self.gamma} if self.credit == "discounted" else {}
        fn = resolve_credit(self.credit, **options)
        out: list[Transition] = []
        for r in self.rollouts:
            credits = assign_credit(fn, CreditInput(r.reward, r.emitted))
            if self.merge:
                out.append(_merged(r, [(c.reward, c.weight) for c in credits]))
            else:
                out += [
                    transition(
                        None,
                        r.rollout_id,
                        [1, 2 + k],
                        [3 + k] * (1 + k % 3),
                        c.reward,
                        task=r.task,
                        call_index=k,
                        rollout_reward=r.reward,
                        credit_weights=[c.weight] * (1 + k % 3),
                    )
                    for k, c in enumerate(credits)
                ]
        return out


def _merged(r: Rollout, credits: list[tuple[float, float]]) -> Transition:
    """One chain of every call: an observation token (masked) between two calls' completions."""
    completion: list[int] = []
    mask: list[int] = []
    weights: list[float] = []
    for k, (_, weight) in enumerate(credits):
        if k:
            completion, mask, weights = [*completion, 9], [*mask, 0], [*weights, 0.0]
        n = 1 + k % 3
        completion += [3 + k] * n
        mask += [1] * n
        weights += [weight] * n
    return transition(
        None,
        r.rollout_id,
        [1, 2],
        completion,
        credits[-1][0],
        task=r.task,
        loss_mask=mask,
        credit_weights=weights,
        rollout_reward=r.reward,
    )


# Rewards: a few values that tie often, and any moderate float (none near the subnormal
# range, even once scaled: see test_normalised_estimators_are_scale_free_without_eps).
REWARDS = st.one_of(
    st.sampled_from([0.0, 1.0, 0.5, -1.0, 0.1, 0.7, 1 / 3]),
    st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False).filter(
        lambda x: x == 0 or abs(x) > 1e-290
    ),
)


@st.composite
def batches(
    draw: st.DrawFn,
    *,
    rewards: st.SearchStrategy[float] = REWARDS,
    equal: bool = False,
    credits: tuple[str, ...] = CREDITS,
    advantages: tuple[str, ...] = ("rollout", "transition"),
) -> Batch:
    """1..3 groups of 1..4 rollouts of 1..6 calls; ``equal``: one reward per group, emitted
    for every call too (``per_call``)."""
    advantage = draw(st.sampled_from(advantages))
    allowed = [c for c in credits if not (c == "per_call" and advantage == "rollout")]
    credit = draw(st.sampled_from(allowed))
    merge = credit != "per_call" and draw(st.booleans())  # the config refuses per_call + merge
    gamma = draw(st.sampled_from([0.5, 0.9, 1.0]))
    rollouts: list[Rollout] = []
    for g in range(draw(st.integers(1, 3))):
        shared = draw(rewards)
        for _ in range(draw(st.integers(1, 4))):
            calls = draw(st.integers(1, 6))
            final = shared if equal else draw(rewards)
            if equal:
                emitted: tuple[float | None, ...] = (final,) * calls
            else:
                emitted = tuple(draw(st.one_of(st.none(), rewards)) for _ in range(calls))
            rollouts.append(Rollout(f"r{len(rollouts)}", f"task{g}", final, emitted))
    return Batch(tuple(rollouts), credit, gamma, merge, advantage)


def _config(batch: Batch, **fields: object) -> GRPOConfig:
    return GRPOConfig.model_validate({"advantage": batch.advantage, **fields})


def _advantages_by_call(
    transitions: list[Transition], config: GRPOConfig
) -> dict[tuple[str, int], list[float]]:
    """Token advantages of each transition (all of them: nothing skipped but a silent batch)."""
    samples, _ = build_samples(transitions, config=config)
    if not samples:
        return {(t.rollout_id, t.call_index): [0.0] * t.num_trained_tokens for t in transitions}
    assert len(samples) == len(transitions)
    return {
        (t.rollout_id, t.call_index): s.advantages
        for t, s in zip(transitions, samples, strict=True)
    }


@PROPERTY
@given(
    batch=batches(equal=True),
    normalize_std=st.booleans(),
    kl_coef=st.sampled_from([0.0, 0.1]),
    loss_normalization=st.sampled_from(["token", "rollout"]),
)
def test_equal_rewards_in_every_group_take_no_step(
    batch: Batch, normalize_std: bool, kl_coef: float, loss_normalization: str
) -> None:
    """Whatever the estimator, credit and call counts: no samples, so the engine takes no step.

    ``discounted`` x ``transition`` per call compares ``R * gamma ** k`` across the group: equal
    final rewards still differ there unless ``gamma`` is 1 (``docs/credit-and-advantages.md``),
    so that combination is drawn with ``gamma`` 1.
    """
    if batch.credit == "discounted" and batch.advantage == "transition" and not batch.merge:
        batch = replace(batch, gamma=1.0)
    config = _config(
        batch,
        normalize_std=normalize_std,
        kl_coef=kl_coef,
        loss_normalization=loss_normalization,
        min_abs_advantage=0.0,  # exact zeros, not residues under the tolerance
        skip_zero_advantage=False,
    )
    transitions = batch.transitions()
    samples, stats = build_samples(transitions, config=config)
    assert samples == []
    assert stats.skipped_zero_advantage == len(transitions)


@PROPERTY
@given(batch=batches(), normalize_std=st.booleans(), data=st.data())
def test_permuting_rollouts_permutes_advantages(
    batch: Batch, normalize_std: bool, data: st.DataObject
) -> None:
    config = _config(
        batch, normalize_std=normalize_std, min_abs_advantage=0.0, skip_zero_advantage=False
    )
    transitions = batch.transitions()
    shuffled = data.draw(st.permutations(transitions))
    want = _advantages_by_call(transitions, config)
    got = _advantages_by_call(shuffled, config)
    assert got.keys() == want.keys()
    for key, values in want.items():
        assert got[key] == pytest.approx(values, rel=1e-12, abs=1e-12), key


# Coarse rewards, so a group's spread is far above the eps added to its std.
COARSE = st.integers(-4, 4).map(lambda k: k / 2)


@PROPERTY
@given(
    batch=batches(rewards=COARSE),
    exponent=st.integers(0, 6),
    c=st.floats(0.01, 100.0),
)
def test_scaling_rewards_scales_raw_advantages_and_keeps_normalised_ones(
    batch: Batch, exponent: int, c: float
) -> None:
    transitions = batch.transitions()
    scaled = batch.scaled(c).transitions()
    raw = {"normalize_std": False, "min_abs_advantage": 0.0, "skip_zero_advantage": False}
    want = _advantages_by_call(transitions, _config(batch, **raw))
    got = _advantages_by_call(scaled, _config(batch, **raw))
    for key, values in want.items():
        assert got[key] == pytest.approx([c * v for v in values], rel=1e-9, abs=1e-12), key
    # normalised: exactly invariant but for eps next to the std; a power of two c >= 1 scales
    # every value exactly, the remaining difference is eps / std (std >= 1/64 / 6 here)
    normed = {**raw, "normalize_std": True}
    power = batch.scaled(2.0**exponent).transitions()
    want = _advantages_by_call(transitions, _config(batch, **normed))
    got = _advantages_by_call(power, _config(batch, **normed))
    for key, values in want.items():
        assert got[key] == pytest.approx(values, rel=1e-3, abs=1e-9), key


@PROPERTY
@given(
    # No subnormals, in the rewards or once scaled: a library loaded by earlier tests in the
    # same process can switch the CPU to flush them to zero, which no formula survives.
    rewards=st.lists(
        st.floats(-1e3, 1e3, allow_subnormal=False).filter(lambda x: x == 0 or abs(x) > 1e-290),
        min_size=2,
        max_size=12,
    ),
    groups=st.lists(st.integers(0, 2), min_size=12, max_size=12),
    calls=st.lists(st.integers(1, 6), min_size=12, max_size=12),
    c=st.floats(1e-3, 1e3),
    estimator=st.sampled_from(sorted(ESTIMATORS)),
)
def test_normalised_estimators_are_scale_free_without_eps(
    rewards: list[float], groups: list[int], calls: list[int], c: float, estimator: str
) -> None:
    """With ``eps`` 0 the normalised advantages do not change at all when rewards scale."""
    n = len(rewards)
    rollout_group = torch.tensor(groups[:n])
    transition_rollout = torch.arange(n).repeat_interleave(torch.tensor(calls[:n]))
    per_call = torch.tensor(rewards, dtype=torch.float64)[transition_rollout]
    per_call = per_call * torch.linspace(0.5, 1.0, len(transition_rollout), dtype=torch.float64)

    def run(scale: float, normalize_std: bool) -> list[float]:
        return ESTIMATORS[estimator](
            rollout_rewards=torch.tensor(rewards, dtype=torch.float64) * scale,
            rollout_group=rollout_group,
            transition_rollout=transition_rollout,
            transition_rewards=per_call * scale,
            normalize_std=normalize_std,
            eps=0.0,
        ).tolist()

    assert run(c, True) == pytest.approx(run(1.0, True), rel=1e-9, abs=1e-9)
    assert run(c, False) == pytest.approx([c * v for v in run(1.0, False)], rel=1e-9, abs=1e-9)


@PROPERTY
@given(batch=batches(advantages=("rollout",)), normalize_std=st.booleans())
def test_a_rollout_of_many_calls_weighs_no_more_than_one_of_one_call(
    batch: Batch, normalize_std: bool
) -> None:
    """``loss_normalization: rollout``: every rollout's norm weights sum to ``1 / R`` and its
    share of the loss, ``sum |advantage * norm|``, is at most ``|A(R)| / R``, whatever its calls.
    """
    config = _config(
        batch,
        normalize_std=normalize_std,
        loss_normalization="rollout",
        min_abs_advantage=0.0,
        skip_zero_advantage=False,
    )
    transitions = batch.transitions()
    samples, _ = build_samples(transitions, config=config)
    if not samples:
        return
    num_rollouts = len(batch.rollouts)
    norm_sum: dict[str, float] = {}
    share: dict[str, float] = {}
    for t, s in zip(transitions, samples, strict=True):
        norm_sum[t.rollout_id] = norm_sum.get(t.rollout_id, 0.0) + sum(s.norm)
        weighted = sum(abs(a * w) for a, w in zip(s.advantages, s.norm, strict=True))
        share[t.rollout_id] = share.get(t.rollout_id, 0.0) + weighted
    tasks = sorted({r.task for r in batch.rollouts})
    per_rollout = group_advantages(
        scores=torch.tensor([r.reward for r in batch.rollouts], dtype=torch.float64),
        groups=torch.tensor([tasks.index(r.task) for r in batch.rollouts]),
        normalize_std=normalize_std,
    ).tolist()
    for r, advantage in zip(batch.rollouts, per_rollout, strict=True):
        assert norm_sum[r.rollout_id] == pytest.approx(1 / num_rollouts, rel=1e-5)
        bound = abs(advantage) / num_rollouts
        assert share[r.rollout_id] <= bound * (1 + 1e-5) + 1e-12, r


@PROPERTY
@given(batch=batches(credits=("final",), advantages=("transition",)), normalize_std=st.booleans())
def test_final_credit_gives_the_same_numbers_with_either_estimator(
    batch: Batch, normalize_std: bool
) -> None:
    transitions = batch.transitions()
    fields = {
        "normalize_std": normalize_std,
        "min_abs_advantage": 0.0,
        "skip_zero_advantage": False,
    }
    by_transition = _advantages_by_call(transitions, _config(batch, **fields))
    by_rollout = _advantages_by_call(
        transitions, _config(replace(batch, advantage="rollout"), **fields)
    )
    for key, values in by_rollout.items():
        assert by_transition[key] == pytest.approx(values, rel=1e-9, abs=1e-12), key


EXTREME = st.one_of(
    st.sampled_from([1e300, -1e300, 1e-300, -1e-300, 3e-300, 0.0, 1.0]),
    st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False),
    st.floats(-1e-290, 1e-290, allow_nan=False, allow_infinity=False),
)


@PROPERTY
@given(batch=batches(rewards=EXTREME), normalize_std=st.booleans())
def test_finite_rewards_give_finite_advantages(batch: Batch, normalize_std: bool) -> None:
    """Huge or tiny but finite rewards: finite advantages, or (unnormalised, beyond float32,
    the loss's precision) a ``ConfigError`` that says so; never inf or NaN."""
    transitions = batch.transitions()
    config = _config(batch, normalize_std=normalize_std, skip_zero_advantage=False)
    try:
        samples, stats = build_samples(transitions, config=config)
    except ConfigError as err:
        assert not normalize_std and "does not fit float32" in str(err)
        return
    for s in samples:
        assert all(math.isfinite(a) and abs(a) <= 3.5e38 for a in s.advantages)
        assert all(math.isfinite(w) for w in s.norm)
    assert math.isfinite(stats.trained_reward_mean)
    if normalize_std:  # bounded by the group size (at most 4 rollouts of 6 calls here)
        assert all(abs(a) <= 8.0 for s in samples for a in s.advantages)


@PROPERTY
@given(
    rewards=st.lists(EXTREME, min_size=1, max_size=10),
    groups=st.lists(st.integers(0, 2), min_size=10, max_size=10),
    normalize_std=st.booleans(),
    estimator=st.sampled_from(sorted(ESTIMATORS)),
)
def test_estimators_are_finite_for_finite_rewards(
    rewards: list[float], groups: list[int], normalize_std: bool, estimator: str
) -> None:
    n = len(rewards)
    values = torch.tensor(rewards, dtype=torch.float64)
    got = ESTIMATORS[estimator](
        rollout_rewards=values,
        rollout_group=torch.tensor(groups[:n]),
        transition_rollout=torch.arange(n),
        transition_rewards=values,
        normalize_std=normalize_std,
    )
    assert got.dtype == torch.float64 and bool(torch.isfinite(got).all())


# -- per-role and offline batches, from call records (issue 46) -------------------------------
#
# Rollouts are recorded as the gateway and the emitters write them: token-level calls, each
# made by an agent (or by none: no header), a reward emitted after some calls (named by the
# call's response id or left to follow it in store order), the final reward; offline, some
# calls were not sampled from the behaviour policy and are excluded. Transition building builds the
# transitions; per-role batches are split by ``split_by_role``, offline ones regrouped by
# ``offline_batch``; then ``build_samples``.

ROLES = {"w": ["writer"], "r": ["rewriter"], "rest": ["*"]}
AGENT_NAMES = ("writer", "rewriter", "checker", None)
RECORDS = settings(PROPERTY, max_examples=60)


@dataclass(frozen=True)
class Recorded:
    """One recorded rollout: per call its agent, emitted reward and whether it is excluded."""

    rollout_id: str
    task: str
    final: float
    agents: tuple[str | None, ...]
    emitted: tuple[float | None, ...]
    excluded: tuple[bool, ...]

    def call_id(self, k: int) -> str:
        return f"{self.rollout_id}-call-{2 * k + 1}"

    def trajectory(self, options: TransitionOptions, *, exclude: bool = True) -> Trajectory:
        calls: list[LLMCall] = []
        spans: list[Span] = []
        for k, (agent, emitted) in enumerate(zip(self.agents, self.emitted, strict=True)):
            made = call(2 * k + 1, [1, 2 + k], [3 + k, 4], rollout_id=self.rollout_id)
            calls.append(made.model_copy(update={"agent_name": agent}))
            if emitted is not None:  # named by response id on odd calls, by order on even
                named = made.response_id if k % 2 else None
                spans.append(
                    reward_span(2 * k + 2, emitted, response_id=named, rollout_id=self.rollout_id)
                )
        spans.append(
            reward_span(2 * len(calls) + 1, self.final, source="return", rollout_id=self.rollout_id)
        )
        skipped = {self.call_id(k) for k, out in enumerate(self.excluded) if out} if exclude else ()
        return build_trajectory(
            rollout_id=self.rollout_id,
            task_id=self.task,
            calls=calls,
            spans=spans,
            options=options,
            exclude=skipped,
        )


@st.composite
def recorded_batches(
    draw: st.DrawFn, *, equal: bool = False, tasks: int = 3, excluding: bool = True
) -> list[Recorded]:
    """1..``tasks`` tasks of 1..3 rollouts of 1..4 calls; ``equal``: one reward for all."""
    shared = draw(COARSE)
    out: list[Recorded] = []
    for g in range(draw(st.integers(1, tasks))):
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 4))
            out.append(
                Recorded(
                    f"r{len(out)}",
                    f"task{g}",
                    shared if equal else draw(COARSE),
                    tuple(draw(st.sampled_from(AGENT_NAMES)) for _ in range(n)),
                    tuple(
                        shared if equal else draw(st.one_of(st.none(), COARSE)) for _ in range(n)
                    ),
                    tuple(excluding and draw(st.booleans()) for _ in range(n)),
                )
            )
    return out


def _role_options(credit: str) -> TransitionOptions:
    """What ``GRPOAlgorithmConfig.transition_options`` gives per-role runs."""
    config = GRPOAlgorithmConfig.model_validate(
        {"adapters": ROLES, "transitions": {"credit": credit}, "grpo": {"advantage": "transition"}}
    )
    return config.transition_options()


def _expected_reward(r: Recorded, k: int) -> float:
    emitted = r.emitted[k]
    return 0.0 if emitted is None else emitted


@RECORDS
@given(batch=recorded_batches(excluding=False), credit=st.sampled_from(["final", "per_call"]))
def test_per_role_batches_train_each_call_into_its_own_role_with_its_own_reward(
    batch: list[Recorded], credit: str
) -> None:
    transitions = [t for r in batch for t in r.trajectory(_role_options(credit)).transitions]
    parts, unrouted = split_by_role(transitions, ROLES)
    by_id = {r.rollout_id: r for r in batch}
    unnamed = sum(agent is None for r in batch for agent in r.agents)
    assert unrouted == unnamed  # served by the base model: no adapter trains them
    for role, part in parts.items():
        for t in part:
            r, k = by_id[t.rollout_id], t.call_index
            assert t.agent_name == r.agents[k] is not None and role_of(t.agent_name, ROLES) == role
            want = _expected_reward(r, k) if credit == "per_call" else r.final
            assert t.reward == want  # never another call's
    assert sum(len(p) for p in parts.values()) + unrouted == len(transitions)


@RECORDS
@given(batch=recorded_batches(equal=True), credit=st.sampled_from(["final", "per_call"]))
def test_per_role_batches_with_equal_rewards_give_no_update(
    batch: list[Recorded], credit: str
) -> None:
    transitions = [t for r in batch for t in r.trajectory(_role_options(credit)).transitions]
    config = GRPOConfig(advantage="transition", min_abs_advantage=0.0, skip_zero_advantage=False)
    for part in split_by_role(transitions, ROLES)[0].values():
        samples, stats = build_samples(part, config=config)
        assert samples == [] and stats.trained_tokens == 0


@RECORDS
@given(batch=recorded_batches(tasks=3, excluding=False), data=st.data())
def test_a_roles_advantages_never_read_another_tasks_rewards(
    batch: list[Recorded], data: st.DataObject
) -> None:
    """Changing every reward of the other tasks leaves a task's advantages, in every role."""
    task = data.draw(st.sampled_from(sorted({r.task for r in batch})))
    changed = [
        r if r.task == task else replace(r, final=r.final + 1.5, emitted=(2.0,) * len(r.agents))
        for r in batch
    ]
    config = GRPOConfig(advantage="transition", min_abs_advantage=0.0, skip_zero_advantage=False)
    options = _role_options("per_call")

    def advantages(rollouts: list[Recorded]) -> dict[tuple[str, str, int], list[float]]:
        out: dict[tuple[str, str, int], list[float]] = {}
        transitions = [t for r in rollouts for t in r.trajectory(options).transitions]
        for role, part in split_by_role(transitions, ROLES)[0].items():
            for key, values in _advantages_by_call(part, config).items():
                out[(role, *key)] = values
        return out

    before, after = advantages(batch), advantages(changed)
    mine = {r.rollout_id for r in batch if r.task == task}
    for key, values in before.items():
        if key[1] in mine:
            assert after[key] == pytest.approx(values, abs=1e-12), key


@RECORDS
@given(batch=recorded_batches(), credit=st.sampled_from(["final", "per_call"]))
def test_offline_batches_keep_every_reward_on_its_own_call(
    batch: list[Recorded], credit: str
) -> None:
    """An excluded (off-behaviour) call is not trained and its reward stays its own: each
    trained call's reward is the one emitted for it, as if nothing had been excluded."""
    options = TransitionOptions(credit=credit)
    by_id = {r.rollout_id: r for r in batch}
    offline = offline_batch([r.trajectory(options) for r in batch])
    whole = {
        (t.rollout_id, t.call_index): t.reward
        for r in batch
        for t in r.trajectory(options, exclude=False).transitions
    }
    trained = {(t.rollout_id, t.call_index) for t in offline.transitions}
    assert trained == {
        (r.rollout_id, k) for r in batch for k, out in enumerate(r.excluded) if not out
    }
    for t in offline.transitions:
        r = by_id[t.rollout_id]
        want = _expected_reward(r, t.call_index) if credit == "per_call" else r.final
        assert t.reward == want == whole[(t.rollout_id, t.call_index)]
        assert t.call_ids == [r.call_id(t.call_index)]


@RECORDS
@given(
    batch=recorded_batches(equal=True),
    anchor_weight=st.sampled_from([0.0, 1.0]),
    advantage=st.sampled_from(["rollout", "transition"]),
)
def test_offline_batches_with_equal_rewards_give_no_update(
    batch: list[Recorded], anchor_weight: float, advantage: str
) -> None:
    offline = offline_batch([r.trajectory(TransitionOptions()) for r in batch])
    config = GRPOConfig.model_validate(
        {
            "advantage": advantage,
            "anchor_weight": anchor_weight,
            "min_abs_advantage": 0.0,
            "skip_zero_advantage": False,
        }
    )
    samples, stats = build_samples(offline.transitions, config=config)
    assert samples == [] and stats.trained_tokens == 0


@RECORDS
@given(batch=recorded_batches(tasks=4, excluding=False), state=st.sampled_from(["plan", None]))
def test_offline_groups_never_mix_tasks(batch: list[Recorded], state: str | None) -> None:
    """Task groups hold one task; the batch group holds one rollout per task (a pooled
    baseline); anchor step groups never compare calls of two tasks."""
    trajectories = [r.trajectory(TransitionOptions()) for r in batch]
    named = [
        tr.model_copy(
            update={
                "transitions": [t.model_copy(update={"state_key": state}) for t in tr.transitions]
            }
        )
        for tr in trajectories
    ]
    offline = offline_batch(named)
    task_of = {r.rollout_id: r.task for r in batch}
    pooled = {t.rollout_id for t in offline.transitions if t.task_id == BATCH_GROUP}
    assert len({task_of[rid] for rid in pooled}) == len(pooled)  # one rollout per task
    for t in offline.transitions:
        if t.task_id != BATCH_GROUP:
            assert t.task_id == task_of[t.rollout_id]
    steps, _ = anchor_advantages(offline.transitions)
    for t, step in zip(offline.transitions, steps, strict=True):
        if step:
            assert t.task_id != BATCH_GROUP
            peers = [
                u
                for u in offline.transitions
                if u.task_id == t.task_id and u.rollout_id != t.rollout_id
            ]
            assert all(task_of[u.rollout_id] == task_of[t.rollout_id] for u in peers)
