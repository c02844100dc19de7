"""Reading whole result sets from a store's role, page by page, so callers never loop on cursors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from fulmen.store.roles import RecordLog, RolloutQueue, RunLog
    from fulmen.types import LLMCall, Page, Rollout, RolloutQuery, RunMetrics, Span

__all__ = ["iter_rollouts", "read_llm_calls", "read_run_metrics", "read_spans"]

_T = TypeVar("_T")


async def read_spans(
    store: RecordLog, rollout_id: str, *, attempt_id: str | None = None
) -> list[Span]:
    """Return every span of a rollout (or of one of its attempts), in sequence order."""
    return await _all_pages(partial(store.query_spans, rollout_id, attempt_id=attempt_id))


async def read_llm_calls(
    store: RecordLog, rollout_id: str, *, attempt_id: str | None = None
) -> list[LLMCall]:
    """Return every LLM call of a rollout (or of one of its attempts), in sequence order."""
    return await _all_pages(partial(store.query_llm_calls, rollout_id, attempt_id=attempt_id))


async def _all_pages(query: Callable[..., Awaitable[Page[_T]]]) -> list[_T]:
    items: list[_T] = []
    after = 0
    while True:
        page = await query(after_sequence=after)
        items += page.items
        if page.next_cursor is None:
            return items
        after = page.next_cursor


async def iter_rollouts(store: RolloutQueue, query: RolloutQuery) -> AsyncIterator[Rollout]:
    """Yield every rollout matching ``query`` (its ``cursor`` is the starting point)."""
    while True:
        page = await store.query_rollouts(query)
        for rollout in page.items:
            yield rollout
        if page.next_cursor is None:
            return
        query = query.model_copy(update={"cursor": page.next_cursor})


async def read_run_metrics(store: RunLog, run_id: str) -> list[RunMetrics]:
    """Return every metrics record of run ``run_id``, in step order (all pages)."""
    records: list[RunMetrics] = []
    after: int | None = None
    while True:
        page = await store.query_run_metrics(run_id, after_step=after, limit=1000)
        records.extend(page.items)
        if page.next_cursor is None:
            return records
        after = page.next_cursor
