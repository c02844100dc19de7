"""A rollout's directory tree, walked without recursion and without following links.

An agent controls what its directory holds: a tree thousands of levels deep (``os.walk`` and
``shutil.rmtree`` recurse, and a path that long cannot even be named), a million empty files
(no blocks: a byte count misses them), a symbolic link to a file only root may read, a FIFO
that blocks whoever opens it. Everything here walks by directory file descriptor
(``openat``-style), so path length does not matter, never follows a link, and stops early:

* ``measure`` counts bytes and entries, up to the limits it is given;
* ``defuse`` removes what a reward function must not open: links that lead out of the tree,
  FIFOs, sockets and device nodes (run once the rollout's processes are gone, so nothing can
  put them back);
* ``remove`` deletes a tree of any depth.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_DEPTH", "Usage", "defuse", "measure", "remove"]

MAX_DEPTH = 256
"""Deeper trees count as over any file limit: no real project nests this deep, and the walk
holds one open descriptor per level."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Usage:
    """What a tree holds, as far as the walk went.

    Attributes:
        bytes: disk blocks of its files, in bytes.
        entries: files, directories, links and others, the top directory excluded.
        too_deep: a directory lies more than ``MAX_DEPTH`` levels down (not walked).
        stopped: the walk stopped at a limit before seeing everything.
    """

    bytes: int
    entries: int
    too_deep: bool = False
    stopped: bool = False


def measure(path: Path, *, max_bytes: int | None = None, max_entries: int | None = None) -> Usage:
    """Count the bytes and entries under ``path``, stopping past either limit."""
    total = entries = 0
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError:
        return Usage(0, 0)
    stack = [(top, os.scandir(top))]
    try:
        while stack:
            fd, scan = stack[-1]
            entry = next(scan, None)
            if entry is None:
                scan.close()
                os.close(fd)
                stack.pop()
                continue
            entries += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            over_bytes = max_bytes is not None and total > max_bytes
            if over_bytes or (max_entries is not None and entries > max_entries):
                return Usage(total, entries, stopped=True)
            if stat.S_ISDIR(info.st_mode):
                if len(stack) >= MAX_DEPTH:
                    return Usage(total, entries, too_deep=True, stopped=True)
                with contextlib.suppress(OSError):
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    stack.append((child, os.scandir(child)))
    finally:
        for fd, scan in stack:
            scan.close()
            os.close(fd)
    return Usage(total, entries)


def defuse(path: Path) -> list[str]:
    """Remove links out of ``path``, FIFOs, sockets and devices under it; return what went.

    A link is kept when its target, resolved, lies inside ``path`` (a repository's own links).
    Names are returned relative to ``path``; a tree deeper than ``MAX_DEPTH`` is walked to that
    depth, and what lies deeper is left to ``remove`` (nothing reads it).
    """
    inside = Path(os.path.realpath(path))
    removed: list[str] = []
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError:
        return removed
    stack: list[tuple[int, Iterator[os.DirEntry[str]], str]] = [(top, os.scandir(top), "")]
    try:
        while stack:
            fd, scan, prefix = stack[-1]
            entry = next(scan, None)
            if entry is None:
                _close(scan)
                os.close(fd)
                stack.pop()
                continue
            name = f"{prefix}{entry.name}"
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if len(stack) < MAX_DEPTH:
                    with contextlib.suppress(OSError):
                        child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                        stack.append((child, os.scandir(child), f"{name}/"))
                continue
            if stat.S_ISREG(mode) or (stat.S_ISLNK(mode) and _leads_inside(inside, name)):
                continue
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=fd)
                removed.append(name)
    finally:
        for fd, scan, _ in stack:
            _close(scan)
            os.close(fd)
    return removed


def _close(scan: Iterator[os.DirEntry[str]]) -> None:
    close = getattr(scan, "close", None)
    if close is not None:
        close()


def _leads_inside(inside: Path, name: str) -> bool:
    """Whether the link ``inside/name`` resolves to a path within ``inside``."""
    if len(str(inside)) + len(name) > 2048:  # too long to resolve reliably: not trusted
        return False
    try:
        target = Path(os.path.realpath(inside / name, strict=False))
    except (OSError, ValueError):
        return False
    return target == inside or target.is_relative_to(inside)


def remove(path: Path) -> None:
    """Delete ``path`` and everything under it, however deep (GNU ``rm``, which uses ``openat``).

    Folders the agent made unreadable to itself are opened up first (``chmod -R u+rwX``) for a
    runner that is not root. Errors are ignored: what cannot be removed stays, logged by ``rm``.
    """
    if not path.exists() and not path.is_symlink():
        return
    for command in (
        ["chmod", "-R", "u+rwX", "--", str(path)],
        ["rm", "-rf", "--one-file-system", "--", str(path)],
    ):
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
