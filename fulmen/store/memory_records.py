"""``MemoryRecords``: the spans, LLM calls and rewards of a ``MemoryStore``.

Plain dictionaries behind the memory store's lock (the store calls these methods with it
held). Each record gets the next sequence number of its rollout; appends are idempotent by the
record's own key. The rollouts and attempts the records name are checked in the
``MemoryQueue`` that holds them; the reward rules come from ``fulmen.store.rewards``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fulmen.errors import InvalidRequest
from fulmen.store.memory_queue import MemoryQueue
from fulmen.store.rewards import REWARD_SPAN_NAME, build_reward, missing_response, replayed_reward
from fulmen.store.stored import stored_call, stored_span
from fulmen.types import LLMCall, LLMCallCreate, Page, Reward, RewardCreate, Span, SpanCreate
from fulmen.types.queries import page_after_sequence

__all__ = ["MemoryRecords"]


class MemoryRecords:
    """Spans by (attempt, span id), calls by call id, rewards by key, each also per rollout."""

    def __init__(self, queue: MemoryQueue) -> None:
        self._queue = queue
        self._spans: dict[tuple[str, str], Span] = {}
        self._spans_by_rollout: dict[str, list[Span]] = {}
        self._calls: dict[str, LLMCall] = {}
        self._calls_by_rollout: dict[str, list[LLMCall]] = {}
        self._tracked_by_response: dict[str, LLMCall] = {}
        self._rewards: dict[str, Reward] = {}
        self._rewards_by_rollout: dict[str, list[Reward]] = {}
        self._last_sequence: dict[str, int] = {}

    # -- spans and LLM calls --------------------------------------------------------------------

    def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """See ``Store.add_spans``."""
        out: list[Span] = []
        for span in spans:
            key = (span.attempt_id, span.span_id)
            stored = self._spans.get(key)
            if stored is None:
                self._queue.check_attempt_of(span.rollout_id, span.attempt_id)
                stored = stored_span(span, self._next_sequence(span.rollout_id))
                self._spans[key] = stored
                self._spans_by_rollout.setdefault(span.rollout_id, []).append(stored)
            out.append(stored)
        return out

    def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """See ``Store.add_llm_calls``."""
        out: list[LLMCall] = []
        for call in calls:
            stored = self._calls.get(call.call_id)
            if stored is None:
                sequence = 0
                if call.rollout_id is not None:
                    if call.attempt_id is None:
                        raise InvalidRequest(f"call {call.call_id}: rollout_id without attempt_id")
                    self._queue.check_attempt_of(call.rollout_id, call.attempt_id)
                    sequence = self._next_sequence(call.rollout_id)
                elif call.attempt_id is not None:
                    raise InvalidRequest(f"call {call.call_id}: attempt_id without rollout_id")
                stored = stored_call(call, sequence)
                self._calls[call.call_id] = stored
                if call.rollout_id is not None:
                    self._calls_by_rollout.setdefault(call.rollout_id, []).append(stored)
                    if call.response_id is not None:
                        self._index_response(stored)
            out.append(stored)
        return out

    def query_spans(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[Span]:
        """See ``Store.query_spans``."""
        _check_limit(limit)
        self._queue.get_rollout(rollout_id)
        rows = self._spans_by_rollout.get(rollout_id, [])
        return page_after_sequence(rows, attempt_id, after_sequence, limit)

    def query_llm_calls(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[LLMCall]:
        """See ``Store.query_llm_calls``."""
        _check_limit(limit)
        self._queue.get_rollout(rollout_id)
        rows = self._calls_by_rollout.get(rollout_id, [])
        return page_after_sequence(rows, attempt_id, after_sequence, limit)

    # -- rewards --------------------------------------------------------------------------------

    def add_reward(self, reward: RewardCreate) -> Reward:
        """See ``Store.add_reward``."""
        if reward.key is not None and reward.key in self._rewards:
            return replayed_reward(self._rewards[reward.key], reward)
        attempt_id: str | None = None
        rollout_id = reward.target_rollout_id()
        if rollout_id is None:
            assert reward.response_id is not None  # RewardCreate names exactly one target
            call = self._tracked_by_response.get(reward.response_id)
            if call is None or call.rollout_id is None:
                raise missing_response(reward.response_id)
            rollout_id, attempt_id = call.rollout_id, call.attempt_id
        self._queue.get_rollout(rollout_id)
        stored = build_reward(
            reward,
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence=self._next_sequence(rollout_id),
        )
        self._rewards[stored.key] = stored
        self._rewards_by_rollout.setdefault(rollout_id, []).append(stored)
        return stored

    def list_rewards(self, rollout_id: str) -> list[Reward]:
        """See ``Store.list_rewards``."""
        self._queue.get_rollout(rollout_id)
        return list(self._rewards_by_rollout.get(rollout_id, []))

    def is_rewarded(self, rollout_id: str) -> bool:
        """Whether the rollout has a reward, as a record or as a reward span."""
        return bool(self._rewards_by_rollout.get(rollout_id)) or any(
            s.name == REWARD_SPAN_NAME for s in self._spans_by_rollout.get(rollout_id, [])
        )

    # -- counts and retention -------------------------------------------------------------------

    def counts(self, rollout_id: str) -> tuple[int, int, int]:
        """Return the spans, LLM calls and rewards recorded for the rollout."""
        return (
            len(self._spans_by_rollout.get(rollout_id, [])),
            len(self._calls_by_rollout.get(rollout_id, [])),
            len(self._rewards_by_rollout.get(rollout_id, [])),
        )

    def totals(self) -> tuple[int, int]:
        """Return the spans and LLM calls stored in all (for ``Store.stats``)."""
        return len(self._spans), len(self._calls)

    def delete(self, rollout_id: str) -> None:
        """Forget everything recorded for a rollout that is being pruned."""
        self._last_sequence.pop(rollout_id, None)
        for span in self._spans_by_rollout.pop(rollout_id, []):
            del self._spans[(span.attempt_id, span.span_id)]
        for call in self._calls_by_rollout.pop(rollout_id, []):
            del self._calls[call.call_id]
            if call.response_id and self._tracked_by_response.get(call.response_id) is call:
                del self._tracked_by_response[call.response_id]
                for other in self._calls.values():  # another call with that id, if any
                    if other.rollout_id is not None and other.response_id == call.response_id:
                        self._index_response(other)
        for reward in self._rewards_by_rollout.pop(rollout_id, []):
            del self._rewards[reward.key]

    # -- internals ------------------------------------------------------------------------------

    def _index_response(self, call: LLMCall) -> None:
        """Let a response id name the call that started last (as the SQL backends choose)."""
        assert call.response_id is not None
        known = self._tracked_by_response.get(call.response_id)
        if known is None or (call.started_at, call.call_id) > (known.started_at, known.call_id):
            self._tracked_by_response[call.response_id] = call

    def _next_sequence(self, rollout_id: str) -> int:
        # Numbers start at 1 per rollout; a rollout's counter goes when the rollout is pruned.
        self._last_sequence[rollout_id] = sequence = self._last_sequence.get(rollout_id, 0) + 1
        return sequence


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidRequest(f"limit must be at least 1, got {limit}")
