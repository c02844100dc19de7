"""Reading another store's rollouts for offline training, and which calls the behaviour sampled.

``read_source`` reads the latest attempt of each rollout a ``StoreSource`` keeps (kept
production traffic, an earlier run's or a teacher's rollouts); the store is only read. For
offline GRPO, ``behaviour_calls`` then keeps only the calls sampled from the behaviour
distribution it corrects for: recorded traffic was not shaped by the gateway (production
sessions) or was shaped by older resources, so each token-level call is judged on the request
its engine got: the recorded request with its rollout's resources' sampling fields for its mode
applied (``LLMResource.request_fields``), by the one rule ``fulmen.types.behaviour`` holds. The
store and the gateway's resource lookup are the trainer's to reach, so this lives here and
reaches the algorithms through ``context.rollouts`` (``StageRollouts``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.types import LLMCall, Mode, Resources
from fulmen.types.behaviour import off_behaviour_reason

if TYPE_CHECKING:
    from fulmen.algorithms.source import StoreSource
    from fulmen.transitions.trajectory import AttemptRecords

__all__ = ["behaviour_calls", "read_source"]


async def read_source(source: StoreSource) -> list[AttemptRecords]:
    """Read the latest attempt of each rollout of the store that ``source`` keeps.

    Its filter picks succeeded rollouts by mode, task, version, end time, agent and reward,
    at most ``max_rollouts`` of them, in enqueue order.
    """
    from fulmen.algorithms.source import keeps
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.transitions.signals import read_signals
    from fulmen.transitions.trajectory import load_attempt

    wanted = source.filter
    attempts: list[AttemptRecords] = []
    # No watchdog: the store is only read, and its owner runs its own.
    async with open_store(source.store, watchdog_interval=None) as store:
        async for rollout in iter_rollouts(store, wanted.query()):
            if wanted.max_rollouts is not None and len(attempts) >= wanted.max_rollouts:
                break
            records = await load_attempt(store, rollout.rollout_id)
            signals = read_signals(records.calls, records.spans, records.rewards)
            reward, agents = signals.final_reward, signals.agent_names
            if keeps(wanted, rollout, reward=reward, agents=agents):
                attempts.append(records)
    return attempts


async def behaviour_calls(
    store_url: str, attempts: Sequence[AttemptRecords], *, temperature: float
) -> tuple[list[AttemptRecords], Counter[str]]:
    """Drop the token-level calls of ``attempts`` not sampled from the behaviour distribution.

    Each call is judged on the request its engine got: the recorded request with the sampling
    fields its rollout's resources set for its mode (none for production traffic, which the
    gateway forwards as the agent sent it), read from the store at ``store_url``. Returns the
    attempts with only the other calls, and how many calls were dropped for each reason.
    """
    from fulmen.gateway.context import sampling_overrides
    from fulmen.store import open_store

    reasons: Counter[str] = Counter()
    kept: list[AttemptRecords] = []
    resources: dict[int, Resources] = {}
    async with open_store(store_url, watchdog_interval=None) as store:
        for attempt in attempts:
            rollout = await store.get_rollout(attempt.rollout_id)
            version = rollout.resources_version
            shaping: Resources | None = None  # what the gateway applied (nothing to sessions)
            if rollout.mode is not Mode.PRODUCTION and version is not None:
                if version not in resources:
                    resources[version] = await store.get_resources(version)
                shaping = resources[version]
            calls: list[LLMCall] = []
            for call in attempt.calls:
                request = call.request
                if shaping is not None:
                    model = request.get("model")
                    request = {**request, **sampling_overrides(shaping, rollout.mode.value, model)}
                reason = off_behaviour_reason(request, temperature=temperature)
                if call.is_token_level and reason is not None:
                    reasons[reason] += 1
                else:
                    calls.append(call)
            kept.append(dataclasses.replace(attempt, calls=calls))
    return kept, reasons
