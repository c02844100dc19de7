"""Set a command agent's resource limits, start it, and stay its reaper until it ends.

Run by path with ``python -I -S`` (the standard library only, nothing of fulmen imported) as
the first program of a sandboxed command: limits set here hold for everything it starts,
sandbox included. Setting them in the runner before ``exec`` would need ``preexec_fn``, which
is unsafe in a process with threads (the runner has several).

    python -I -S launcher.py [--go-fd N] [--marker PATH] --limit data=4294967296 ... -- PROGRAM ARGS

``--go-fd N``: wait until file descriptor N is closed or written to before anything else (the
runner first moves this process into the rollout's control groups). The launcher then marks
itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), starts the command as its child and
waits: every process the command leaves behind (a double fork, ``nohup``, ``setsid``) becomes
the launcher's child instead of init's, so none escapes. When the command ends, what it left is
killed and the launcher exits with the command's status (``128 + N`` for signal N, as a shell
reports it). ``--marker PATH`` is written once the command is running (its ``exec``
succeeded): a runner that finds no marker knows the command never started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["descendants", "kill_all", "main", "stat_fields"]

_LIMITS = {
    "data": resource.RLIMIT_DATA,
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
}
_PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def stat_fields(pid: int | str) -> list[bytes] | None:
    """Return the fields of ``/proc/PID/stat`` after the command name; ``None``: no such process.

    Field 0 is the state, 1 the parent's id, 11 to 14 the user and system CPU ticks of the
    process and of the children it reaped (``proc(5)``, counted from 3).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields follow the last ")".
    return stat[stat.rfind(b")") + 2 :].split()


def descendants(root: int) -> list[int]:
    """Return every live process below ``root`` (by parent ids read from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        fields = stat_fields(name) if name.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(name))
    found, frontier = [], [root]
    while frontier:
        for pid in children.get(frontier.pop(), ()):
            found.append(pid)
            frontier.append(pid)
    return found


def kill_all(
    find: Callable[[], list[int]], *, rounds: int = 200, between: Callable[[], None] | None = None
) -> None:
    """SIGKILL the processes ``find()`` returns, again until it returns none (or ``rounds``).

    A fork bomb forks while it is killed, so once is not enough. ``between`` runs after each
    round (reaping, or a short sleep).
    """
    for _ in range(rounds):
        pids = find()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if between is not None:
            between()


def _kill_left_behind() -> None:
    """SIGKILL every process below this one until none is left, reaping them."""
    me = os.getpid()
    kill_all(lambda: descendants(me), between=_reap_all)
    _reap_all()


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _start(command: list[str]) -> tuple[int, str | None]:
    """Fork and exec ``command``; return its pid and, if ``exec`` failed, why (pid reaped)."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, False)  # closed by a successful exec: EOF means started
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            os.write(write_end, f"{code}:{exc.strerror}".encode())
        os._exit(127)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        failure = pipe.read().decode(errors="replace")
    if failure:
        os.waitpid(pid, 0)
        return pid, failure
    return pid, None


def main(argv: list[str]) -> None:
    """Apply the options (see the module docstring), run the command, exit with its status."""
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    marker = None
    for index in range(0, len(options), 2):
        name, value = options[index], options[index + 1]
        if name == "--go-fd":
            fd = int(value)
            os.read(fd, 1)  # the runner writes (or closes) once this process is placed
            os.close(fd)
        elif name == "--marker":
            marker = value
        elif name == "--limit":
            kind, _, number = value.partition("=")
            # CPU: SIGXCPU at the soft limit (reported as cpu_limit), SIGKILL one second later.
            hard = int(number) + 1 if kind == "cpu" else int(number)
            resource.setrlimit(_LIMITS[kind], (int(number), hard))
        else:
            raise SystemExit(f"launcher: unknown option {name!r}")
    # Python ignores these two; an ignored signal stays ignored across exec.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    _subreaper()
    pid, failure = _start(command)
    if failure is not None:
        code, _, why = failure.partition(":")
        # The shell's convention: 127 for a program that is not there, 126 for one that cannot run.
        print(f"fulmen: cannot run {command[0]!r}: {why}", file=sys.stderr, flush=True)
        os._exit(int(code))
    if marker is not None:
        with open(marker, "w") as f:
            f.write(str(pid))
    # The runner's SIGTERM reaches the command; this process only waits and reaps.
    signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(pid, signum))
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:  # pragma: no cover: the command is our child until reaped
            os._exit(1)
        if done == pid:
            break
    _kill_left_behind()
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main(sys.argv[1:])
