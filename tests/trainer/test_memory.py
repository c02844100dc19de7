"""Freed memory goes back to the system once per step: glibc's arenas, as an update leaves them.

The pattern is the trainer's: a worker thread allocates blocks under glibc's mmap threshold
(64 KB, under even its lowest default, so whatever an earlier test or library set, they come
from the thread's arena), keeps small ones between them alive, and frees the big ones. glibc
keeps those pages; ``release_freed_memory`` must hand them back and say how much it did.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest

from fulmen.trainer.memory import release_freed_memory, resident_bytes

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc malloc_trim and /proc are Linux's"
)

MB = 1 << 20


def _fragment_an_arena(blocks: int, size: int) -> list[int]:
    """In a thread of its own, free ``blocks`` touched blocks of ``size`` between live ones."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    kept: list[int] = []

    def work() -> None:
        big = []
        for _ in range(blocks):
            block = libc.malloc(size)
            ctypes.memset(block, 1, size)  # resident, as a tensor's pages are
            big.append(block)
            kept.append(libc.malloc(64))  # stays: the freed blocks are not at the heap's top
        for block in big:
            libc.free(block)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return kept


def test_memory_a_thread_freed_is_given_back_and_reported() -> None:
    before = resident_bytes()
    assert before is not None and before > 0
    kept = _fragment_an_arena(blocks=6400, size=64 * 1024)  # 400 MB freed, still resident
    held = resident_bytes()
    assert held is not None and held - before > 300 * MB, "glibc returned the blocks itself"
    metrics = release_freed_memory()
    assert metrics["memory/released_gb"] * (1 << 30) > 300 * MB
    assert metrics["memory/rss_gb"] * (1 << 30) < held - 300 * MB
    assert 0 <= metrics["memory/release_s"] < 5
    after = resident_bytes()
    assert after is not None and after < held - 300 * MB
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    for block in kept:
        libc.free(block)
