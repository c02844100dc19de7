"""A child started in its own session: is it the one listening on a port; stop its group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

__all__ = ["listens_on", "stop_process_group"]


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


def listens_on(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Return whether ``proc`` or one of its descendants holds a listening socket on ``port``.

    A port picked free (``free_port``) is only free until someone binds it: a server started on
    it can lose it to another process that picked the same number, and a health check on the
    port is then answered by that other server. This tells the two apart. Without psutil (or on
    a platform where it cannot list a process's sockets) it answers ``True``: the health check
    alone decides, as before.
    """
    try:
        import psutil
    except ImportError:
        return True
    try:
        root = psutil.Process(proc.pid)
        family = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
    for member in family:
        try:
            sockets = member.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            return True
        if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets):
            return True
    return False
