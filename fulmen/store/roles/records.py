"""The record log: spans, LLM calls and rewards of rollouts, appended and read by sequence.

``RecordLog`` is the face the gateway's recorder, the tracer, reward posting and the trace
adapter depend on. See ``fulmen.store.roles.queue`` for how a role splits the checks from the
backend's work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.store.roles.core import StoreCore

if TYPE_CHECKING:
    from fulmen.types import LLMCall, LLMCallCreate, Page, Reward, RewardCreate, Span, SpanCreate

__all__ = ["RecordLog"]


class RecordLog(StoreCore, ABC):
    """Append spans, LLM calls and rewards to rollouts; read them back in sequence order."""

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """Store spans and give each a sequence number.

        A span already stored is returned as it was, not stored twice.
        """
        if not spans:
            return []
        async with self._writing:
            return await self._add_spans(list(spans))

    async def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """Store LLM call records and give tracked ones a sequence number.

        Idempotent by ``call_id``.
        """
        if not calls:
            return []
        async with self._writing:
            return await self._add_llm_calls(list(calls))

    async def query_spans(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[Span]:
        """Spans of a rollout with ``sequence > after_sequence``, in sequence order."""
        async with self._reading:
            return await self._query_spans(rollout_id, attempt_id, after_sequence, limit)

    async def query_llm_calls(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[LLMCall]:
        """LLM calls of a rollout with ``sequence > after_sequence``, in sequence order."""
        async with self._reading:
            return await self._query_llm_calls(rollout_id, attempt_id, after_sequence, limit)

    async def add_reward(self, reward: RewardCreate) -> Reward:
        """Store a reward for a rollout, even long after it finished; idempotent by ``key``.

        The rollout is found by id, by session id, or through the LLM call whose response id is
        given (``NotFound`` when none matches). The reward gets the rollout's next sequence
        number, so it is later than every span and call recorded before it. The same ``key``
        with other content raises ``Conflict``.
        """
        async with self._writing:
            return await self._add_reward(reward)

    async def list_rewards(self, rollout_id: str) -> list[Reward]:
        """Return the rewards posted for a rollout, in sequence order; ``NotFound`` if unknown."""
        async with self._reading:
            return await self._list_rewards(rollout_id)

    # -- the backend's work ----------------------------------------------------------------------

    @abstractmethod
    async def _add_spans(self, spans: list[SpanCreate]) -> list[Span]: ...

    @abstractmethod
    async def _add_llm_calls(self, calls: list[LLMCallCreate]) -> list[LLMCall]: ...

    @abstractmethod
    async def _query_spans(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[Span]: ...

    @abstractmethod
    async def _query_llm_calls(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[LLMCall]: ...

    @abstractmethod
    async def _add_reward(self, reward: RewardCreate) -> Reward: ...

    @abstractmethod
    async def _list_rewards(self, rollout_id: str) -> list[Reward]: ...
