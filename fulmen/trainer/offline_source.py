"""Which recorded calls were sampled from the behaviour distribution offline GRPO corrects for.

Recorded traffic was not shaped by the gateway (production sessions) or was shaped by older
resources, so each token-level call is judged on the request its engine got: the recorded
request with its rollout's resources' sampling fields for its mode applied
(``LLMResource.request_fields``), by the one rule ``fulmen.types.behaviour`` holds. The store
and the gateway's resource lookup are the trainer's to reach, so this lives here and reaches
the offline loop through ``StageContext.behaviour_calls``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.types import LLMCall, Mode, Resources
from fulmen.types.behaviour import off_behaviour_reason

if TYPE_CHECKING:
    from fulmen.adapter.transitions import AttemptRecords

__all__ = ["behaviour_calls"]


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
