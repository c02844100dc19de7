"""Run async servers on their own event loop in a thread, for synchronous test code.

schemathesis and hypothesis drive requests synchronously; the servers under test (uvicorn,
stores with loop-bound connections) need a running loop. ``in_thread(factory)`` enters the
async context manager ``factory()`` on a loop in a background thread, yields what it yields,
and leaves it (on that loop) when the ``with`` block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

__all__ = ["in_thread"]

T = TypeVar("T")


@contextlib.contextmanager
def in_thread(
    factory: Callable[[], AbstractAsyncContextManager[T]], *, start_timeout_s: float = 60.0
) -> Iterator[T]:
    """Enter ``factory()`` on a loop in a background thread and yield its value."""
    started = threading.Event()
    stop = threading.Event()
    holder: dict[str, Any] = {}

    async def run() -> None:
        async with factory() as value:
            holder["value"] = value
            started.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # surfaced to the caller below
            holder["error"] = exc
            started.set()

    thread = threading.Thread(target=main, name="contract-servers", daemon=True)
    thread.start()
    if not started.wait(start_timeout_s):
        raise RuntimeError(f"servers did not start within {start_timeout_s} s")
    if "error" in holder:
        raise RuntimeError("servers failed to start") from holder["error"]
    try:
        yield holder["value"]
    finally:
        stop.set()
        thread.join(30)
        if "error" in holder:
            raise RuntimeError("servers failed while running") from holder["error"]
