"""What the spans of an attempt say about its LLM calls: agent names and rewards.

This is the one place where transition building reads span semantics, and it reads them only through
``fulmen.tracing.semconv`` (the names and readers the emitters share). A call's agent is the
name it carried to the gateway (the ``x-fulmen-agent`` header, ``LLMCall.agent_name``) or,
failing that, the one its spans give (OpenInference instrumentation, optional). Calls are
joined to spans by the response id the gateway recorded, never by clocks. An explicit per-call
reward (an ``emit_reward`` made while the agent runs, not the rollout's return value) belongs to
the call named by the reward span's response id, or else to the latest call before it in store
order (of the same agent when the reward span names one).

The final reward is the latest value of the primary reward, in store sequence order, over the
reward spans and the rewards posted to the store (``Store.add_reward``). A posted reward takes
the rollout's next sequence number when it is stored, so one posted after the run, even hours
later, overrides what the run emitted; named values merge by name, and the latest reward that
names a primary decides which name is the reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fulmen.tracing import semconv
from fulmen.types import LLMCall, Reward, Span
from fulmen.types.rewards import SCORING_ERROR_KEY

__all__ = ["RolloutSignals", "latest_reward", "read_signals"]

_RETURN_SOURCE = "return"


@dataclass(frozen=True)
class RolloutSignals:
    """Agent names and rewards of one attempt, aligned with its calls in store order.

    Attributes:
        final_reward: the attempt's primary reward, ``None`` when none was emitted.
        agent_names: the agent of each call (``None`` when neither it nor a span names one).
        call_rewards: the explicit reward emitted for each call (``None`` when none); several
            rewards for one call are summed.
    """

    final_reward: float | None
    agent_names: tuple[str | None, ...]
    call_rewards: tuple[float | None, ...]


def latest_reward(spans: Sequence[Span], rewards: Sequence[Reward] = ()) -> float | None:
    """Return the primary reward as of the latest reward span or posted reward.

    Values merge by name in sequence order and the latest primary name picks the value, as
    ``fulmen.tracing.semconv.primary_reward`` does for spans alone; ``None`` when no reward
    names a primary. A posted reward whose metadata carries ``SCORING_ERROR_KEY`` (its
    judge failed) withdraws the primary until a later reward names one.
    """
    events: list[tuple[int, dict[str, float], str | None, bool]] = [
        (e.sequence, e.values, e.primary, False) for e in semconv.reward_events(spans)
    ]
    events.extend(
        (r.sequence, r.values, r.primary, isinstance(r.metadata.get(SCORING_ERROR_KEY), str))
        for r in rewards
    )
    merged: dict[str, float] = {}
    primary: str | None = None
    for _, values, name, withdraws in sorted(events, key=lambda e: e[0]):
        merged.update(values)
        if withdraws:
            primary = None
        elif name is not None:
            primary = name
    return None if primary is None else merged.get(primary)


def read_signals(
    calls: Sequence[LLMCall], spans: Sequence[Span], posted: Sequence[Reward] = ()
) -> RolloutSignals:
    """Read the final reward, each call's agent and each call's explicit reward.

    ``calls`` must be in store sequence order; ``posted`` are the rewards posted for the
    attempt (see the module docstring for which one counts). Reward spans whose source is the
    rollout's return value, and posted rewards, count only toward the final reward.
    """
    by_response = semconv.agent_names_by_response_id(spans)
    # The name the call itself carried (``x-fulmen-agent``) first; spans fill in the rest.
    agents = tuple(
        c.agent_name or (by_response.get(c.response_id) if c.response_id is not None else None)
        for c in calls
    )
    index_by_response = {c.response_id: i for i, c in enumerate(calls) if c.response_id}
    response_by_sequence = {
        s.sequence: s.attributes.get(semconv.RESPONSE_ID)
        for s in spans
        if s.name == semconv.SPAN_REWARD
    }
    rewards: list[float | None] = [None] * len(calls)
    for event in semconv.reward_events(spans):
        if event.source == _RETURN_SOURCE:
            continue
        value = _event_value(event)
        if value is None:
            continue
        response_id = response_by_sequence.get(event.sequence)
        if isinstance(response_id, str) and response_id in index_by_response:
            index: int | None = index_by_response[response_id]
        else:
            index = _latest_call_before(calls, agents, event.sequence, event.agent_name)
        if index is not None:
            previous = rewards[index]
            rewards[index] = value if previous is None else previous + value
    return RolloutSignals(
        final_reward=latest_reward(spans, posted),
        agent_names=agents,
        call_rewards=tuple(rewards),
    )


def _event_value(event: semconv.RewardEvent) -> float | None:
    """Return the number a reward span stands for: its primary value, else the default."""
    for name in (event.primary, semconv.DEFAULT_REWARD_NAME):
        if name is not None and name in event.values:
            return event.values[name]
    if len(event.values) == 1:
        return next(iter(event.values.values()))
    return None


def _latest_call_before(
    calls: Sequence[LLMCall],
    agents: Sequence[str | None],
    sequence: int,
    agent_name: str | None,
) -> int | None:
    for index in range(len(calls) - 1, -1, -1):
        if calls[index].sequence >= sequence:
            continue
        if agent_name is None or agents[index] in (None, agent_name):
            return index
    return None
