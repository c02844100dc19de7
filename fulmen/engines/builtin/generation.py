"""The async side of one request: submit a job to the batching thread and gather its events.

Events cross from the batching thread with ``loop.call_soon_threadsafe`` into an
``asyncio.Queue``. :meth:`Generation.start` waits for admission, so the policy version (and
any admission error) is known before the HTTP response starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fulmen.engines.builtin.batching import Scheduler
from fulmen.engines.builtin.sampling import SamplingParams
from fulmen.engines.builtin.sequence import Job, JobFailed, JobStarted, TokenEvent

__all__ = ["ChoiceResult", "Generation"]


@dataclass
class ChoiceResult:
    """Everything generated for one choice."""

    index: int
    token_ids: list[int] = field(default_factory=lambda: [])
    logprobs: list[float] = field(default_factory=lambda: [])
    top: list[tuple[tuple[int, float], ...]] = field(default_factory=lambda: [])
    text: str = ""
    finish_reason: str | None = None


class Generation:
    """One submitted job and the queue its events arrive on."""

    def __init__(self, job: Job, queue: asyncio.Queue[JobStarted | JobFailed | TokenEvent]):
        self.job = job
        self._queue = queue
        self.policy_version = -1
        self.prompt_ids = job.prompt_ids

    @classmethod
    async def start(
        cls,
        scheduler: Scheduler,
        prompt_ids: list[int],
        params: SamplingParams,
        adapter: str | None,
        n: int,
    ) -> Generation:
        """Submit a job and wait until it is admitted; raises its ``APIError`` if refused."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[JobStarted | JobFailed | TokenEvent] = asyncio.Queue()

        def sink(event: JobStarted | JobFailed | TokenEvent) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)  # called on the batching thread

        job = Job(prompt_ids, params, adapter, n, sink)
        scheduler.submit(job)
        gen = cls(job, queue)
        try:
            first = await queue.get()
        except asyncio.CancelledError:
            job.cancelled = True
            raise
        if isinstance(first, JobFailed):
            raise first.error
        if isinstance(first, JobStarted):
            gen.policy_version = first.policy_version
        return gen

    async def events(self) -> AsyncIterator[TokenEvent]:
        """Token events until every choice has finished; cancels the job if abandoned."""
        remaining = self.job.n
        try:
            while remaining:
                event = await self._queue.get()
                if isinstance(event, JobFailed):
                    raise event.error
                if isinstance(event, TokenEvent):
                    if event.finish_reason is not None:
                        remaining -= 1
                    yield event
        finally:
            if remaining:
                self.job.cancelled = True

    async def collect(self) -> list[ChoiceResult]:
        """Wait for the whole job and return one result per choice, by index."""
        results = [ChoiceResult(i) for i in range(self.job.n)]
        async for event in self.events():
            r = results[event.index]
            r.token_ids.append(event.token_id)
            r.logprobs.append(event.logprob)
            r.top.append(event.top)
            r.text += event.text
            r.finish_reason = event.finish_reason
        return results
