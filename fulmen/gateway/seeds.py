"""The seed of each call of a seeded rollout (``fulmen.types.sampling_seed``).

The gateway counts, per attempt, how often each request came before, so a repeated request
gets a new seed; the counts of the most recent attempts are kept (bounded: an attempt that
ended long ago is forgotten, and a forgotten count only means its next call is seeded as if it
were the first again).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from fulmen.gateway.context import CallContext
from fulmen.types.sampling_seed import call_seed, request_digest

__all__ = ["CallSeeds"]


class CallSeeds:
    """Hands out each call's seed from its rollout's sampling seed and the agent's request.

    Args:
        max_attempts: attempts whose request counts are remembered.
    """

    def __init__(self, max_attempts: int = 4096) -> None:
        self._max = max_attempts
        self._counts: OrderedDict[str, dict[bytes, int]] = OrderedDict()

    def seed_for(self, ctx: CallContext | None, body: Mapping[str, Any]) -> int | None:
        """Return the seed to send with ``body``, or ``None`` when its rollout is not seeded."""
        if ctx is None or ctx.sampling_seed is None:
            return None
        counts = self._counts.get(ctx.attempt_id)
        if counts is None:
            counts = self._counts[ctx.attempt_id] = {}
            if len(self._counts) > self._max:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(ctx.attempt_id)
        digest = request_digest(body)
        occurrence = counts.get(digest, 0)
        counts[digest] = occurrence + 1
        return call_seed(
            ctx.sampling_seed, attempt=ctx.attempt_number, digest=digest, occurrence=occurrence
        )
