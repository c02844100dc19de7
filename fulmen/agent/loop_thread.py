"""Running an async agent in a thread with its own event loop, so it cannot freeze the runner.

An async agent shares the runner's event loop unless it is moved out: one that blocks (a
``time.sleep`` inside ``async def``, a CPU-bound loop) stops every other rollout, the
heartbeats and the span sender; one that swallows ``CancelledError`` keeps running after its
timeout. ``run_in_loop_thread`` gives each attempt a thread and an event loop of its own. The
runner awaits a future that the thread completes; cancelling that await cancels the agent's task
in its own loop and returns within ``STOP_GRACE_S``, whether or not the agent yields. An agent
that does not yield is abandoned: its thread runs on unobserved until the agent returns, and
whatever it returns or emits then is ignored (the runner drops later spans of a stopped
attempt).

Measured against the alternatives (``benchmarks/runner_overhead.py``): see the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["STOP_GRACE_S", "run_in_loop_thread"]

T = TypeVar("T")

STOP_GRACE_S = 0.4
"""How long a cancelled agent may take to stop before it is abandoned."""


class _AgentThread:
    """The thread, its loop and its one task; ``cancel`` may be called from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._is_cancelled = False

    def started(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
        """Record the agent's loop and task; ``False`` when a cancel came first."""
        with self._lock:
            self._loop, self._task = loop, task
            return not self._is_cancelled

    def cancel(self) -> None:
        """Cancel the agent's task in its own loop (or before it starts)."""
        with self._lock:
            self._is_cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)


async def run_in_loop_thread(
    make: Callable[[], Coroutine[Any, Any, T]], *, name: str = "fulmen-agent"
) -> T:
    """Run the coroutine ``make()`` in a new thread with its own event loop; return its result.

    Exceptions of the coroutine are raised here. Cancelling this call cancels the coroutine in
    its loop, waits up to ``STOP_GRACE_S`` for it to finish (so a cooperative agent's last
    spans, its root span included, are emitted before the attempt is closed), then raises
    ``CancelledError`` whether or not the agent stopped.
    """
    caller = asyncio.get_running_loop()
    finished: asyncio.Future[tuple[Any, BaseException | None]] = caller.create_future()
    agent = _AgentThread()

    def settle(result: Any, error: BaseException | None) -> None:
        if not finished.done():
            finished.set_result((result, error))

    async def body() -> T:
        task = asyncio.current_task()
        if task is None or not agent.started(asyncio.get_running_loop(), task):
            raise asyncio.CancelledError
        return await make()

    def main() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            with asyncio.Runner() as runner:
                result = runner.run(body())
        except BaseException as exc:  # handed to the caller's loop
            error = exc
        with contextlib.suppress(RuntimeError):  # the caller's loop already closed
            caller.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=main, name=name, daemon=True).start()
    try:
        result, error = await asyncio.shield(finished)
    except asyncio.CancelledError:
        agent.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # a second cancel ends the grace
            await asyncio.wait({finished}, timeout=STOP_GRACE_S)
        raise
    if isinstance(error, asyncio.CancelledError):
        raise asyncio.CancelledError  # the agent cancelled itself
    if error is not None:
        raise error
    return result
