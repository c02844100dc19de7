"""What every part of the store's face shares: the open state and the locking policy.

A backend gives the face one lock (the memory store, whose parts are plain Python objects) or
none (the SQL store and the HTTP client: their transactions and the server do their own
serialising). Every operation enters one of two sections: a read, which takes the lock, and a
write, which takes it and refuses a closed store. Both are written here once, so no backend
spells its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType

from fulmen.errors import InvalidRequest

__all__ = ["Capabilities", "ReconcileReport", "Section", "StoreCore"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; tests skip by capability, never by backend name.

    Attributes:
        is_durable: data survives a restart of the process that holds the store.
        is_shared: several processes or machines may use the same store at once.
        is_remote: the store is reached over the network (the HTTP client).
    """

    is_durable: bool
    is_shared: bool
    is_remote: bool = False


@dataclass(frozen=True)
class ReconcileReport:
    """What one watchdog pass changed: attempts it ended and rollouts it re-queued or failed."""

    timed_out: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


class Section:
    """``async with``: take the store's lock, if it has one; a write also refuses a closed store.

    A plain class, not a generator-based context manager: it is entered on every store call,
    and the memory store's calls are a few microseconds each.
    """

    __slots__ = ("_core", "_lock", "_writes")

    def __init__(self, core: StoreCore, lock: asyncio.Lock | None, *, writes: bool) -> None:
        self._core = core
        self._lock = lock
        self._writes = writes

    async def __aenter__(self) -> None:
        if self._lock is not None:
            await self._lock.acquire()
        if self._writes and self._core.closed:
            if self._lock is not None:
                self._lock.release()
            raise InvalidRequest("the store is closed")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._lock is not None:
            self._lock.release()


class StoreCore:
    """The state under every role of the store's face: closed or not, and its two sections.

    Not abstract itself: each role is an ``ABC`` with abstract work methods.
    """

    def __init__(self, *, lock: asyncio.Lock | None = None) -> None:
        self.closed = False
        self._reading = Section(self, lock, writes=False)
        self._writing = Section(self, lock, writes=True)
