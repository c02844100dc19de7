"""Freed memory goes back to the system once per step: glibc's arenas, as an update leaves them.

The pattern is the trainer's: a worker thread allocates blocks under glibc's mmap threshold
(64 KB, under even its lowest default, so they come from the thread's arena), keeps small ones
between them alive, and frees the big ones. glibc keeps those pages; ``trim_freed_memory``
must hand them back and say how much it did.

The measurement runs in a fresh interpreter: in a test process that already ran other tests,
glibc hands the new thread an arena a finished thread left behind, freed pages still resident,
and the blocks land in those without the process growing (seen once in CI: 7 MB instead of 400).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc malloc_trim and /proc are Linux's"
)

MB = 1 << 20

_MEASURE = """
import ctypes, json, threading
from fulmen.trainer.memory import trim_freed_memory, resident_bytes

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
kept = []

def work(blocks=6400, size=64 * 1024):
    big = []
    for _ in range(blocks):
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)  # resident, as a tensor's pages are
        big.append(block)
        kept.append(libc.malloc(64))  # stays: the freed blocks are not at the heap's top
    for block in big:
        libc.free(block)

before = resident_bytes()
thread = threading.Thread(target=work)
thread.start()
thread.join()
held = resident_bytes()
metrics = trim_freed_memory()
print(json.dumps({"before": before, "held": held, "after": resident_bytes(), **metrics}))
"""


def test_memory_a_thread_freed_is_given_back_and_reported() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["held"] - seen["before"] > 300 * MB, f"glibc returned the blocks itself: {seen}"
    assert seen["memory/trimmed_gb"] * (1 << 30) > 300 * MB, seen
    assert seen["memory/rss_gb"] * (1 << 30) < seen["held"] - 300 * MB, seen
    assert 0 <= seen["memory/trim_s"] < 5, seen
    assert seen["after"] < seen["held"] - 300 * MB, seen
