from __future__ import annotations

import math

import pytest

from fulmen.errors import ConfigError
from fulmen.transitions import build_trajectory
from fulmen.transitions.credit import (
    CallCredit,
    CreditInput,
    assign_credit,
    resolve_credit,
)

from .factories import call, reward_span


def _run(name: str, final: float, rewards: tuple[float | None, ...], **opts: float) -> list:
    return assign_credit(resolve_credit(name, **opts), CreditInput(final, rewards))


def test_final_gives_every_call_the_final_reward() -> None:
    assert _run("final", 2.0, (None, None, None)) == [CallCredit(2.0, 1.0)] * 3


def test_discounted_from_the_end() -> None:
    got = _run("discounted", 1.0, (None, None, None), gamma=0.5)
    assert got == [CallCredit(0.25, 0.25), CallCredit(0.5, 0.5), CallCredit(1.0, 1.0)]


def test_discounted_default_gamma_and_bad_gamma() -> None:
    got = _run("discounted", 1.0, (None, None))
    assert got[0].reward == pytest.approx(0.9) and got[1].reward == 1.0
    with pytest.raises(ConfigError, match="gamma"):
        _run("discounted", 1.0, (None,), gamma=1.5)


def test_last_call_only() -> None:
    got = _run("last", 3.0, (None, None, None))
    assert got == [CallCredit(0.0, 0.0), CallCredit(0.0, 0.0), CallCredit(3.0, 1.0)]


def test_per_call_uses_emitted_rewards_and_zero_for_missing() -> None:
    got = _run("per_call", 9.0, (0.5, None, -1.0))
    assert got == [CallCredit(0.5, 1.0), CallCredit(0.0, 1.0), CallCredit(-1.0, 1.0)]


def test_zero_calls() -> None:
    assert _run("final", 1.0, ()) == []


def test_unknown_name_and_unknown_option_are_errors() -> None:
    with pytest.raises(ConfigError, match="unknown credit strategy 'nope'"):
        resolve_credit("nope")
    with pytest.raises(ConfigError, match="gamma"):
        resolve_credit("final", gamma=0.5)


def test_user_function_and_wrong_length() -> None:
    def first_only(rollout: CreditInput) -> list[CallCredit]:
        return [CallCredit(rollout.final_reward, 1.0)] + [CallCredit(0.0, 0.0)] * (
            rollout.num_calls - 1
        )

    fn = resolve_credit(first_only)
    assert assign_credit(fn, CreditInput(1.0, (None, None))) == [
        CallCredit(1.0, 1.0),
        CallCredit(0.0, 0.0),
    ]
    with pytest.raises(ConfigError, match="returned 1 credits for 2 calls"):
        assign_credit(lambda r: [CallCredit(1.0)], CreditInput(1.0, (None, None)))


@pytest.mark.parametrize(
    "credit",
    [
        CallCredit(-math.inf, 1.0),  # a user function returning log(0)
        CallCredit(math.inf, 1.0),
        CallCredit(math.nan, 1.0),
        CallCredit(1.0, math.inf),
        CallCredit(1.0, -math.inf),
        CallCredit(1.0, math.nan),
    ],
)
def test_non_finite_credit_is_an_error_naming_the_call(credit: CallCredit) -> None:
    """Issue 27: an infinite credit passed the NaN check and turned the adapter into NaN."""

    def second_call_bad(rollout: CreditInput) -> list[CallCredit]:
        return [CallCredit(0.5, 1.0), credit, CallCredit(1.0, 1.0)]

    with pytest.raises(ConfigError, match=r"non-finite credit for call 1 \(c-2\) of 3") as err:
        assign_credit(
            second_call_bad, CreditInput(1.0, (None,) * 3), call_ids=["c-1", "c-2", "c-3"]
        )
    assert err.value.detail["call_index"] == 1 and err.value.detail["call_id"] == "c-2"
    with pytest.raises(ConfigError, match=r"non-finite credit for call 1 of 3"):
        assign_credit(second_call_bad, CreditInput(1.0, (None,) * 3))


@pytest.mark.parametrize("name", ["final", "discounted", "last", "per_call"])
def test_an_infinite_reward_is_refused_by_every_strategy(name: str) -> None:
    with pytest.raises(ConfigError, match="non-finite credit"):
        _run(name, math.inf, (math.inf, math.inf))


def test_the_adapter_names_the_call_whose_credit_is_not_finite() -> None:
    calls = [call(1, [1], [2]), call(2, [1], [3])]

    def log_of_zero(rollout: CreditInput) -> list[CallCredit]:
        return [CallCredit(math.log(r) if r else -math.inf) for r in (1.0, 0.0)]

    with pytest.raises(ConfigError, match=r"call 1 \(r1-call-2\)"):
        build_trajectory(
            rollout_id="r1", calls=calls, spans=[reward_span(3, 1.0)], credit=log_of_zero
        )


def test_role_aware_discount_counts_the_hand_offs_between_agents() -> None:
    from fulmen.transitions.credit import CreditInput, discounted_credit

    agents = ("planner", "planner", "executor", "executor", "planner")
    rollout = CreditInput(2.0, (None,) * 5, agents)
    plain = discounted_credit(rollout, gamma=1.0, gamma_role=0.85)
    # hand-offs on the way to the reward: 2, 2, 1, 1, 0
    assert [c.weight for c in plain] == pytest.approx([0.85**2, 0.85**2, 0.85, 0.85, 1.0])
    assert [c.reward for c in plain] == pytest.approx([2 * 0.85**2, 2 * 0.85**2, 1.7, 1.7, 2.0])
    both = discounted_credit(rollout, gamma=0.5, gamma_role=0.85)
    assert both[0].weight == pytest.approx(0.5**4 * 0.85**2)
    assert both[3].weight == pytest.approx(0.5 * 0.85)
    # Unknown agents (or gamma_role 1): per-call discounting alone.
    unknown = discounted_credit(CreditInput(1.0, (None,) * 3), gamma=0.5, gamma_role=0.85)
    assert [c.weight for c in unknown] == [0.25, 0.5, 1.0]
    with pytest.raises(ConfigError, match="gamma_role"):
        discounted_credit(rollout, gamma_role=1.5)


def test_transition_options_pass_gamma_role_to_the_adapter() -> None:
    from fulmen.transitions import TransitionOptions, build_trajectory

    from .factories import agent_span, call, reward_span

    calls = [call(1, [1], [2]), call(2, [3], [4]), call(3, [5], [6])]
    spans = [
        agent_span(10, "planner", "resp-r1-1"),
        agent_span(11, "executor", "resp-r1-2"),
        agent_span(12, "executor", "resp-r1-3"),
        reward_span(13, 1.0),
    ]
    options = TransitionOptions(credit="discounted", gamma=1.0, gamma_role=0.5)
    traj = build_trajectory(rollout_id="r1", calls=calls, spans=spans, options=options)
    assert [t.reward for t in traj.transitions] == [0.5, 1.0, 1.0]
