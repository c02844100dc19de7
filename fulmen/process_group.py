"""Stopping a child started in its own session: the whole group, politely first."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

__all__ = ["stop_process_group"]


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL it after ``grace_s`` seconds, reap ``proc``.

    ``proc`` must have been started with ``start_new_session=True``, so that the group holds
    its children (an engine's workers, a runner's agents) and nothing else.
    """
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
