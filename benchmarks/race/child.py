"""A trainer's process, stopped with the race.

Each run trains in a child process (``fulmen train``, or the race's own TRL side). With
``subprocess.run`` a race stopped by SIGTERM (``kill``, ``timeout``, a scheduler) died alone and
left the trainer training for the rest of its 30-minute budget, on a machine whose next
measurement needs it idle. Here the race passes the stop on and waits for the trainer to stop:
``fulmen train`` stops at its next safe point and stops its engine (its second signal would cut
that short, so the child is sent one only).
"""

from __future__ import annotations

import signal
import subprocess
from types import FrameType
from typing import Any

#: Seconds a stopped trainer gets to stop its engine before it is killed.
STOP_S = 60.0


def stop_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in this process, so ``run_child`` can act on it."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def run_child(argv: list[str], **popen: object) -> Any:
    """Run ``argv`` to its end like ``subprocess.run(argv, check=True)``, stopping it with us.

    Returns the child's standard output where ``popen`` pipes it (``stdout=subprocess.PIPE``),
    else ``None``; a failed child raises ``CalledProcessError`` with that output. On SIGTERM
    (as ``SystemExit``, see :func:`stop_on_sigterm`) the child is sent SIGTERM. On Ctrl-C the
    terminal has sent the child SIGINT already, so it is only waited for, and sent SIGTERM if
    it is still running after ``STOP_S`` (an interrupt sent to this process alone). A child
    still running ``STOP_S`` after that is killed. The exception is raised again.
    """
    with subprocess.Popen(argv, **popen) as child:  # type: ignore[call-overload]
        try:
            out, _ = child.communicate()
        except BaseException as stop:
            if not isinstance(stop, KeyboardInterrupt) or _running_after(child, STOP_S):
                child.terminate()
            if _running_after(child, STOP_S):
                child.kill()
            raise
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, argv, output=out)
    return out


def _running_after(child: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False
