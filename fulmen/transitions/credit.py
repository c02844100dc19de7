"""Credit assignment: how a rollout's reward is shared among its LLM calls.

A strategy is a plain function of a ``CreditInput`` (the rollout's final reward and the explicit
per-call rewards the agent emitted) returning one ``CallCredit`` per call: the call's reward
and its weight. The trainer applies the credit once: with GRPO's ``rollout`` estimator a call
receives ``weight`` times the rollout's group-relative advantage; with ``transition`` the
advantage is computed from the credited ``reward`` (which already carries the credit, e.g.
``R * gamma ** k``), and a weight of 0 only marks a call that gets no credit at all
(``docs/credit-and-advantages.md`` has the table). Built-in strategies live in
``CREDIT_STRATEGIES``; any function with the same signature works too:

>>> def halves(rollout: CreditInput) -> list[CallCredit]:
...     return [CallCredit(rollout.final_reward / 2, 0.5)] * rollout.num_calls
>>> [c.weight for c in assign_credit(halves, CreditInput(1.0, (None, None)))]
[0.5, 0.5]
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from fulmen.errors import ConfigError

__all__ = [
    "CREDIT_STRATEGIES",
    "CallCredit",
    "CreditFn",
    "CreditInput",
    "assign_credit",
    "discounted_credit",
    "final_credit",
    "last_credit",
    "per_call_credit",
    "resolve_credit",
]


class CallCredit(NamedTuple):
    """What one call is credited with: a reward and a weight on the rollout's advantage.

    ``reward`` feeds the ``transition`` advantage estimator, ``weight`` scales the ``rollout``
    estimator's advantage; a strategy sets both so that each estimator credits the call alike.
    """

    reward: float
    weight: float = 1.0


@dataclass(frozen=True)
class CreditInput:
    """What a credit strategy sees of one rollout.

    Attributes:
        final_reward: the rollout's final reward.
        call_rewards: the explicit reward emitted for each credited call (``None``: none),
            in call order; its length is the number of calls to credit.
        agents: the agent that made each credited call, in the same order (empty: unknown),
            for strategies that discount where control passes between agents.
    """

    final_reward: float
    call_rewards: tuple[float | None, ...]
    agents: tuple[str | None, ...] = ()

    @property
    def num_calls(self) -> int:
        """How many calls get credit."""
        return len(self.call_rewards)


CreditFn = Callable[[CreditInput], Sequence[CallCredit]]


def final_credit(rollout: CreditInput) -> list[CallCredit]:
    """Every call gets the final reward and the whole advantage."""
    return [CallCredit(rollout.final_reward, 1.0)] * rollout.num_calls


def discounted_credit(
    rollout: CreditInput, *, gamma: float = 0.9, gamma_role: float = 1.0
) -> list[CallCredit]:
    """Call ``i`` of ``n`` gets ``gamma ** (n - 1 - i) * gamma_role ** h_i`` of the reward.

    ``h_i`` counts the hand-offs after call ``i``: the later calls whose agent differs from the
    call before them (role-aware discount: a planner's call is discounted once more for each
    time control passed to another agent on the way to the reward). ``gamma_role`` 1 (the
    default) or unknown agents leave plain per-call discounting.
    """
    for name, value in (("gamma", gamma), ("gamma_role", gamma_role)):
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name} must be in [0, 1]; got {value!r}")
    n = rollout.num_calls
    agents = rollout.agents if len(rollout.agents) == n else (None,) * n
    handoffs_after = [0] * n
    for i in range(n - 2, -1, -1):
        handoffs_after[i] = handoffs_after[i + 1] + (agents[i + 1] != agents[i])
    factors = [gamma ** (n - 1 - i) * gamma_role ** handoffs_after[i] for i in range(n)]
    return [CallCredit(rollout.final_reward * f, f) for f in factors]


def last_credit(rollout: CreditInput) -> list[CallCredit]:
    """Only the last call gets the reward and the advantage; earlier calls get 0."""
    n = rollout.num_calls
    return [
        CallCredit(rollout.final_reward, 1.0) if i == n - 1 else CallCredit(0.0, 0.0)
        for i in range(n)
    ]


def per_call_credit(rollout: CreditInput) -> list[CallCredit]:
    """Each call gets the reward the agent emitted for it (0 when none), full weight."""
    return [CallCredit(0.0 if r is None else r, 1.0) for r in rollout.call_rewards]


CREDIT_STRATEGIES: Mapping[str, Callable[..., Sequence[CallCredit]]] = {
    "final": final_credit,
    "discounted": discounted_credit,
    "last": last_credit,
    "per_call": per_call_credit,
}


def resolve_credit(strategy: str | CreditFn, **options: Any) -> CreditFn:
    """Return the credit function a built-in name (options bound) or a user function gives.

    Raises ``ConfigError`` for an unknown name or an option the strategy does not take.
    """
    if callable(strategy):
        fn: Callable[..., Sequence[CallCredit]] = strategy
    elif strategy in CREDIT_STRATEGIES:
        fn = CREDIT_STRATEGIES[strategy]
    else:
        raise ConfigError(
            f"unknown credit strategy {strategy!r}",
            detail={"allowed": sorted(CREDIT_STRATEGIES)},
        )
    if not options:
        return fn
    accepted = {
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(
            f"credit strategy {strategy!r} takes no option(s) {unknown}",
            detail={"accepted": sorted(accepted)},
        )
    return functools.partial(fn, **options)


def assign_credit(
    fn: CreditFn, rollout: CreditInput, *, call_ids: Sequence[str] = ()
) -> list[CallCredit]:
    """Run a credit function and check it returned one finite credit per call.

    ``call_ids`` are the credited calls' ids, in order, to name the call an error is about.

    Raises:
        ConfigError: the number of credits is not the number of calls, or a reward or weight
            is not finite (NaN, or the infinity of a ``log(0)``), which would turn the
            advantages, the loss and then the weights into NaN.
    """
    credits = [CallCredit(float(c[0]), float(c[1])) for c in fn(rollout)]
    if len(credits) != rollout.num_calls:
        raise ConfigError(
            f"credit function returned {len(credits)} credits for {rollout.num_calls} calls"
        )
    for k, credit in enumerate(credits):
        if not (math.isfinite(credit.reward) and math.isfinite(credit.weight)):
            call_id = call_ids[k] if k < len(call_ids) else None
            name = f"call {k}" + (f" ({call_id})" if call_id is not None else "")
            raise ConfigError(
                f"credit function returned a non-finite credit for {name} of "
                f"{rollout.num_calls} (final reward {rollout.final_reward!r}): {credit!r}; "
                "rewards and weights must be finite numbers",
                detail={"call_index": k, "call_id": call_id, "credit": list(credit)},
            )
    return credits
