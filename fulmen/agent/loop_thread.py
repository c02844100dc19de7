"""Running async agents in threads with their own event loops, so they cannot freeze the runner.

An async agent shares the runner's event loop unless it is moved out: one that blocks (a
``time.sleep`` inside ``async def``, a CPU-bound loop) stops every other rollout, the
heartbeats and the span sender; one that swallows ``CancelledError`` keeps running after its
timeout. ``LoopThreads.run`` runs each attempt's coroutine in a fresh event loop on a thread of
its own. The runner awaits a future that the thread completes; cancelling that await cancels
the agent's task in its own loop and returns within ``STOP_GRACE_S``, whether or not the agent
yields. An agent that does not yield is abandoned: its thread runs on unobserved until the
agent returns, and whatever it returns or emits then is ignored (the runner drops later spans
of a stopped attempt); the thread then serves later attempts again.

Threads are kept and reused: starting a thread blocks the caller until the new thread runs,
which cost the runner's loop more than the rest of a no-op rollout (``runner_overhead.py``).
Each attempt still gets a new event loop, so nothing an agent leaves behind reaches the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["STOP_GRACE_S", "LoopThreads"]

T = TypeVar("T")

STOP_GRACE_S = 0.4
"""How long a cancelled agent may take to stop before it is abandoned."""


class _Job:
    """One coroutine to run in a worker thread, and the way back to the caller's loop."""

    def __init__(
        self,
        make: Callable[[], Coroutine[Any, Any, Any]],
        caller: asyncio.AbstractEventLoop,
        finished: asyncio.Future[tuple[Any, BaseException | None]],
    ) -> None:
        self._make = make
        self._caller = caller
        self._finished = finished
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._is_cancelled = False

    def run(self, on_done: Callable[[], None]) -> None:
        """Run the coroutine to its end in a new event loop (in the worker thread).

        ``on_done`` is called before the caller learns the outcome, so a thread that marks
        itself idle there is reused by the caller's next job.
        """
        result: Any = None
        error: BaseException | None = None
        try:
            with asyncio.Runner() as runner:
                result = runner.run(self._body())
        except BaseException as exc:  # handed to the caller's loop
            error = exc
        on_done()
        with contextlib.suppress(RuntimeError):  # the caller's loop already closed
            self._caller.call_soon_threadsafe(self._settle, result, error)

    async def _body(self) -> Any:
        task = asyncio.current_task()
        with self._lock:
            self._loop, self._task = asyncio.get_running_loop(), task
            if self._is_cancelled or task is None:
                raise asyncio.CancelledError  # stopped before it started
        try:
            return await self._make()
        finally:
            _abort_leftover_connections(asyncio.get_running_loop())

    def _settle(self, result: Any, error: BaseException | None) -> None:
        if not self._finished.done():
            self._finished.set_result((result, error))

    def cancel(self) -> None:
        """Cancel the coroutine in its own loop (or before it starts); any thread."""
        with self._lock:
            self._is_cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)


def _abort_leftover_connections(loop: asyncio.AbstractEventLoop) -> None:
    """Abort the socket connections an attempt left open on its loop, before the loop closes.

    An agent that never closes its HTTP client (``AsyncOpenAI()`` in the agent function, the
    README's own first draft) leaves pooled connections on the attempt's loop. The client is
    collected later, often by the garbage collector on another thread, and its ``aclose`` then
    touches those connections on a closed loop: one "Event loop is closed" traceback per attempt.
    An aborted connection is marked lost while its loop still runs, so that later close returns
    quietly. The selector loop's registry of transports is private but stable since 3.4; a loop
    without one (uvloop) is left alone.
    """
    transports = getattr(loop, "_transports", None)
    if transports is None:
        return
    for transport in list(transports.values()):
        if isinstance(transport, asyncio.Transport) and not transport.is_closing():
            transport.abort()


class LoopThreads:
    """Worker threads that run one coroutine at a time each, in a fresh event loop per run.

    A thread is started when none is idle and kept for later runs; ``close`` ends them (an
    abandoned one ends once its agent returns). Use one per runner, from its event loop.
    """

    def __init__(self, *, name: str = "fulmen-agent") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0
        self._is_closed = False

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run the coroutine ``make()`` on a worker thread's own loop; return its result.

        Exceptions of the coroutine are raised here. Cancelling this call cancels the coroutine
        in its loop, waits up to ``STOP_GRACE_S`` for it to finish (so a cooperative agent's
        last spans, its root span included, are emitted before the attempt is closed), then
        raises ``CancelledError`` whether or not the agent stopped.
        """
        finished: asyncio.Future[tuple[Any, BaseException | None]] = (
            asyncio.get_running_loop().create_future()
        )
        job = _Job(make, asyncio.get_running_loop(), finished)
        self._submit(job)
        try:
            result, error = await asyncio.shield(finished)
        except asyncio.CancelledError:
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # a second cancel ends the grace
                await asyncio.wait({finished}, timeout=STOP_GRACE_S)
            raise
        if isinstance(error, asyncio.CancelledError):
            raise asyncio.CancelledError  # the agent cancelled itself
        if error is not None:
            raise error
        return result

    def close(self) -> None:
        """Let every worker thread end once it is idle (busy ones finish their run first)."""
        with self._lock:
            if self._is_closed:
                return
            self._is_closed = True
            count = self._started
        for _ in range(count):
            self._jobs.put(None)

    def _submit(self, job: _Job) -> None:
        with self._lock:
            if self._is_closed:
                raise RuntimeError("the LoopThreads are closed")
            if self._idle:
                self._idle -= 1  # that thread takes this job from the queue
                start = False
            else:
                self._started += 1
                start = True
        self._jobs.put(job)
        if start:
            name = f"{self._name}-{self._started}"
            threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run(self._now_idle)

    def _now_idle(self) -> None:
        with self._lock:
            self._idle += 1
