"""A rollout's own directory: ``work/`` (the command's working directory), ``home/``, ``tmp/``.

``Workspaces`` hands out one per attempt under a base folder only its owner lists (mode 0711),
each owned by the user the rollout runs as and closed to others (0700), and removes it after.
User ids for rollouts come from a pool (``uid_base`` + slot) locked machine-wide, so that no
two running rollouts share one, whichever runner runs them; a slot is free again when its
rollout's directory is removed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from fulmen.agent.command import tree

__all__ = ["UID_LOCKS", "Workspace", "Workspaces"]

UID_LOCKS = Path("/tmp/fulmen-rollout-uids")
"""Where runners on this machine lock the user ids their running rollouts use (root only)."""
_MAX_SLOTS = 4096


@dataclass(frozen=True)
class Workspace:
    """One attempt's directory and the user id it runs as (``None``: the runner's own)."""

    root: Path
    uid: int | None

    @property
    def work(self) -> Path:
        """The command's working directory."""
        return self.root / "work"

    @property
    def home(self) -> Path:
        """``$HOME`` for the command (its clients' config files go here)."""
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        """``$TMPDIR`` without ``bwrap`` (which gives a private ``/tmp`` instead)."""
        return self.root / "tmp"

    @property
    def task_file(self) -> Path:
        """The task as JSON (``$FULMEN_TASK_FILE``), outside ``work/``: a repository stays clean."""
        return self.root / "task.json"


class Workspaces:
    """Makes and removes rollout directories under ``base`` (a new temporary folder if ``None``).

    A temporary base is removed when this object is collected or the process exits, unless it
    still holds a directory kept by ``keep_workdir`` (then it stays, for the user to read).
    """

    def __init__(self, base: Path | None, *, uid_base: int | None) -> None:
        if base is None:
            base = Path(tempfile.mkdtemp(prefix="fulmen-command-"))
            # One runner's base per agent setup: left behind, every run adds a folder to /tmp.
            weakref.finalize(self, _remove_temporary_base, base)
        self.base = base
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o711)  # others may pass through to their own directory only
        self._uid_base = uid_base
        self._slots: dict[int, BinaryIO] = {}  # slot → its lock file, held
        self._lock = threading.Lock()  # attempts run in threads of their own

    def create(
        self,
        task: Any,
        *,
        template: Path | None,
        files: Callable[[Workspace], dict[str, str]],
    ) -> Workspace:
        """Make a new attempt directory: the template copied, the task and ``files`` written.

        ``files`` gives path → content for the new workspace (templates need its paths).
        """
        uid = self._take_uid()
        # A short random name: the relay's Unix socket lives inside, and socket paths are
        # limited to 107 bytes; the rollout's ids are in the command's environment anyway.
        root = self.base / uuid.uuid4().hex[:12]
        try:
            root.mkdir(mode=0o700)
            if template is not None:
                shutil.copytree(template, root / "work", symlinks=True)
            else:
                (root / "work").mkdir()
            (root / "home").mkdir()
            (root / "tmp").mkdir()
            space = Workspace(root, uid)
            space.task_file.write_text(json.dumps(task, ensure_ascii=False))
            for relative, text in files(space).items():
                path = (
                    space.home / relative[2:]
                    if relative.startswith("~/")
                    else space.work / relative
                )
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            if uid is not None:
                for folder, dirs, names in os.walk(root):
                    for entry in [folder, *(os.path.join(folder, n) for n in dirs + names)]:
                        os.chown(entry, uid, uid, follow_symlinks=False)
        except BaseException:
            self._give_back(uid)
            shutil.rmtree(root, ignore_errors=True)
            raise
        return space

    def remove(self, space: Workspace, *, keep: bool) -> None:
        """Remove the directory (unless ``keep``) and free its user id, whatever it holds.

        The agent chose the tree's shape: ``tree.remove`` takes any depth, and the user id
        is freed even if removing failed.
        """
        try:
            if not keep:
                tree.remove(space.root)
        finally:
            self._give_back(space.uid)

    def _take_uid(self) -> int | None:
        """Take a user id no running rollout of any runner on this machine has.

        A slot is held by an exclusive ``flock`` on its file in ``UID_LOCKS`` for as long as
        the rollout runs: runners are separate processes (a trainer's, ``fulmen runner``'s, a
        benchmark's), and one that ended a rollout kills every process of its user id, so two
        rollouts must never share one. A runner that died lets go of its locks with it.
        """
        if self._uid_base is None:
            return None
        UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
        with self._lock:
            for slot in range(_MAX_SLOTS):
                if slot in self._slots:
                    continue
                uid = self._uid_base + slot
                handle = open(UID_LOCKS / f"uid-{uid}.lock", "a+b")  # noqa: SIM115 (held)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                self._slots[slot] = handle
                return uid
        raise RuntimeError(
            f"all {_MAX_SLOTS} rollout user ids from {self._uid_base} are taken on this machine"
        )

    def _give_back(self, uid: int | None) -> None:
        if uid is not None and self._uid_base is not None:
            with self._lock:
                handle = self._slots.pop(uid - self._uid_base, None)
            if handle is not None:
                handle.close()  # releases the lock


def _remove_temporary_base(base: Path) -> None:
    """Remove a temporary base and the sandbox's helper scripts in it, keeping kept rollouts."""
    try:
        shutil.rmtree(base / "bin", ignore_errors=True)
        base.rmdir()
    except OSError:
        pass  # a rollout directory kept on purpose (keep_workdir), or already gone
