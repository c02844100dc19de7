"""Group commit for the store service: concurrent appends become one store call.

Runners send spans and the gateway sends LLM calls one request at a time, from many rollouts
at once. Each ``add_spans`` call is one transaction on SQL backends, and a transaction costs far
more than a row, so the server merges the appends that arrive while the previous one is being
written into a single call. An idle server adds no delay: the first request is written at once,
and only requests that arrive meanwhile wait for the next call.

Semantics stay those of separate calls: items keep their arrival order (so sequence numbers of
one rollout still follow its requests), each request gets back exactly its own results, and if
the merged call fails, nothing was written (a store call is atomic), so each request is run
again on its own and gets its own result or error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from fulmen.errors import StoreUnavailable

__all__ = ["WriteCoalescer"]

In = TypeVar("In")
Out = TypeVar("Out")


class WriteCoalescer(Generic[In, Out]):
    """Merge concurrent ``write(items)`` calls into fewer calls of ``write``.

    Args:
        write: an idempotent, atomic batch write returning one result per item, in order
            (``Store.add_spans``, ``Store.add_llm_calls``).
        max_items: the most items merged into one call.
    """

    def __init__(
        self, write: Callable[[Sequence[In]], Awaitable[list[Out]]], *, max_items: int = 5000
    ) -> None:
        self._write = write
        self._max_items = max_items
        self._pending: list[tuple[Sequence[In], asyncio.Future[list[Out]]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, items: Sequence[In]) -> list[Out]:
        """Write ``items`` (merged with whatever else is waiting) and return their results."""
        future: asyncio.Future[list[Out]] = asyncio.get_running_loop().create_future()
        self._pending.append((items, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="fulmen-store-coalescer")
        return await future

    def _take(self) -> list[tuple[Sequence[In], asyncio.Future[list[Out]]]]:
        taken: list[tuple[Sequence[In], asyncio.Future[list[Out]]]] = []
        count = 0
        while self._pending and (not taken or count + len(self._pending[0][0]) <= self._max_items):
            entry = self._pending.pop(0)
            taken.append(entry)
            count += len(entry[0])
        return taken

    async def _flush(self) -> None:
        group: list[tuple[Sequence[In], asyncio.Future[list[Out]]]] = []
        try:
            await self._flush_all(group)
        except BaseException:
            # Cancelled (the server is stopping): nobody may wait forever for an answer.
            for _, future in [*group, *self._pending]:
                if not future.done():
                    future.set_exception(StoreUnavailable("the store service is stopping"))
            self._pending.clear()
            raise

    async def _flush_all(self, group: list[tuple[Sequence[In], asyncio.Future[list[Out]]]]) -> None:
        while self._pending:
            group[:] = self._take()
            if len(group) == 1:
                await self._run_alone(*group[0])
                continue
            merged = [item for items, _ in group for item in items]
            try:
                results = await self._write(merged)
            except Exception:
                # Nothing was written; find out which request was at fault by running each.
                for items, future in group:
                    await self._run_alone(items, future)
                continue
            start = 0
            for items, future in group:
                if not future.done():
                    future.set_result(results[start : start + len(items)])
                start += len(items)

    async def _run_alone(self, items: Sequence[In], future: asyncio.Future[list[Out]]) -> None:
        try:
            result = await self._write(items)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)
