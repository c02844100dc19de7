"""One service process owned by a Ray actor: started, watched, stopped, and never orphaned.

Each actor of the fleet runs one fulmen command (``fulmen store serve``, ``fulmen serve``,
``fulmen runner``) as a child process. The child asks the kernel to signal it when the actor's
process dies (``PR_SET_PDEATHSIG``): SIGKILL by default, so a killed actor never leaves a runner
heartbeating; SIGTERM for an engine server, which then stops the vLLM server it started. A
watcher thread notices a child that exits on its own: a service that should run forever then
takes its actor down with it, and Ray restarts the actor (the actor's ``max_restarts``), which
starts a new child.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from fulmen.process_group import stop_process_group

__all__ = ["ChildProcess"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent(signum: int) -> Callable[[], None]:
    """Return a pre-exec hook asking Linux to send ``signum`` when the forking thread exits."""

    def hook() -> None:  # pragma: no cover - runs in the child between fork and exec
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)

    return hook


class ChildProcess:
    """A command in its own process group, dying with its parent, watched by a thread.

    Args:
        command: the argv to run.
        env: the child's whole environment.
        cwd: its working directory (``None``: the parent's).
        log_path: file receiving its stderr (appended to).
        out_path: file receiving its stdout (truncated); ``last_line`` reads it.
        on_exit: called from the watcher thread with the exit code when the child exits
            without ``stop`` having been called.
        death_signal: what the child gets when its parent dies.
    """

    def __init__(
        self,
        command: list[str],
        *,
        env: dict[str, str],
        cwd: str | None,
        log_path: Path,
        out_path: Path,
        on_exit: Callable[[int], None],
        death_signal: int = signal.SIGKILL,
    ) -> None:
        self.command = command
        self._env, self._cwd = env, cwd
        self.log_path, self.out_path = log_path, out_path
        self._on_exit = on_exit
        self._death_signal = death_signal
        self._proc: subprocess.Popen[bytes] | None = None
        self._files: list[IO[bytes]] = []
        self._stopping = threading.Event()

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` before ``start``)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit code once the child exited, else ``None``."""
        return self._proc.poll() if self._proc is not None else None

    def start(self) -> None:
        """Spawn the child and its watcher thread."""
        if self._proc is not None:
            raise RuntimeError("ChildProcess already started; create a new one")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
        out = open(self.out_path, "wb")  # noqa: SIM115 - closed by stop()
        self._files = [log, out]
        logger.info("starting %s", " ".join(self.command))
        self._proc = subprocess.Popen(
            self.command,
            env=self._env,
            cwd=self._cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=log,
            start_new_session=True,
            preexec_fn=_die_with_parent(self._death_signal),  # only prctl: no locks taken
        )
        threading.Thread(target=self._watch, name="fulmen-child-watch", daemon=True).start()

    def _watch(self) -> None:
        proc = self._proc
        if proc is None:
            return
        code = proc.wait()
        if not self._stopping.is_set():
            self._on_exit(code)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM the child's group, SIGKILL it after ``grace_s``; return its exit code."""
        self._stopping.set()
        proc = self._proc
        if proc is None:
            return None
        stop_process_group(proc, grace_s)
        for file in self._files:
            file.close()
        self._files = []
        return proc.returncode

    def last_line(self) -> str | None:
        """Return the last non-empty line of the child's stdout (``fulmen runner``'s counts)."""
        try:
            lines = self.out_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        lines = [line for line in lines if line.strip()]
        return lines[-1] if lines else None

    def log_tail(self, n: int = 20) -> str:
        """Return the last ``n`` lines of the child's stderr (for error messages)."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])
