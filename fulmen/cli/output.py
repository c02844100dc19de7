"""A command's output into a pipe that closes early (``fulmen rollouts list | head -1``).

When the reader of a pipe exits, the next write raises ``BrokenPipeError``, and Python's own
flush of ``sys.stdout`` at exit raises it once more ("Exception ignored in ..."). Both are
noise: the reader had what it wanted. ``run_command`` runs a command so that a closed pipe
ends it quietly; ``quiet_broken_pipe`` wraps one command's function the same way.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BROKEN_PIPE_EXIT", "quiet_broken_pipe", "run_command"]

#: The exit status a shell reports for a command that SIGPIPE ended (128 + 13), as ``git log``
#: gives under ``| head``.
BROKEN_PIPE_EXIT = 141


def run_command(func: Callable[[Any], int | None], args: Any) -> int:
    """Run ``func(args)`` and flush its output; a closed output pipe ends it with 141, quietly.

    The flush happens here, inside the ``try``, so that the interpreter's flush at exit has
    nothing left to write (it would print its own ``BrokenPipeError`` message otherwise).
    """
    try:
        code = int(func(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return BROKEN_PIPE_EXIT
    return code


def quiet_broken_pipe(func: Callable[[Any], int | None]) -> Callable[[Any], int]:
    """Wrap a command function (``args -> exit code``) with ``run_command``."""

    @functools.wraps(func)
    def wrapper(args: Any) -> int:
        return run_command(func, args)

    return wrapper


def _discard_stdout() -> None:
    """Point stdout at ``/dev/null``: what is still buffered can no longer fail at exit."""
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing flushes it at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)
