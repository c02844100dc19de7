"""A control group per rollout: every process of it counted, limited and killed together.

Resource limits (``setrlimit``) hold per process: children that replace one another pass a CPU
limit, shared memory and tmpfs pages pass a data-segment limit, and a process that leaves its
process group and user id behind escapes a kill. A control group holds every process a rollout
starts, whatever it does, so the runner (as root) can:

* kill the whole rollout at once (cgroup v2's ``cgroup.kill``, else each member);
* read its CPU time, the dead processes' included (v2 ``cpu.stat``, v1 ``cpuacct.usage``),
  for a CPU budget of the rollout rather than per process;
* cap its memory, page cache, tmpfs and shared memory included (v2 ``memory.max`` where the
  controller is delegated, else v1 ``memory.limit_in_bytes``), and with v2 its processes
  (``pids.max``; each rollout's own user id limits them too).

``RolloutCgroups.create`` makes what this machine allows and says what it got
(``CgroupSet.holds``); without any (no root, no cgroup file system) the sandbox falls back to
resource limits and a subreaper (``launcher.py``). Only the standard library is used, by path
under ``/sys/fs/cgroup``: v2 alone (the unified layout of current distributions), v1, or both
(the hybrid layout, v2 at ``/sys/fs/cgroup/unified``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fulmen.agent.command.launcher import kill_all

__all__ = ["CgroupSet", "RolloutCgroups"]

logger = logging.getLogger(__name__)

_ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """Map each hierarchy of this process (``""`` for v2, else a v1 controller) to its path."""
    paths: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            paths[""] = path
        for name in controllers.split(","):
            if name:
                paths[name] = path
    return paths


def _v2_mount() -> Path | None:
    for candidate in (_ROOT, _ROOT / "unified"):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists():
            return candidate
    return None


def _v1_mount(controller: str) -> Path | None:
    for candidate in (_ROOT / controller, _ROOT / f"cpu,{controller}", _ROOT / f"{controller},cpu"):
        v2 = (candidate / "cgroup.controllers").exists()
        if (candidate / "cgroup.procs").exists() and not v2:
            return candidate
    return None


@dataclass
class CgroupSet:
    """The control groups of one rollout (one per hierarchy this machine has).

    Attributes:
        unified: its cgroup v2 directory (membership, CPU time, kill; memory and process
            limits where the controllers are delegated), or ``None``.
        v1: its cgroup v1 directories by controller (``memory``, ``pids``, ``cpuacct``).
        holds: what is enforced: ``memory``, ``pids``, ``cpu`` (time measured), ``kill``.
    """

    unified: Path | None = None
    v1: dict[str, Path] = field(default_factory=lambda: {})
    holds: frozenset[str] = frozenset()

    @property
    def dirs(self) -> list[Path]:
        """Every directory of the set."""
        return [*([self.unified] if self.unified is not None else []), *self.v1.values()]

    def place(self, pid: int) -> None:
        """Move process ``pid`` (not yet running the command) into every group of the set."""
        for folder in self.dirs:
            (folder / "cgroup.procs").write_text(f"{pid}\n")

    def members(self) -> list[int]:
        """Return the process ids in the set (from its first group)."""
        for folder in self.dirs:
            with contextlib.suppress(OSError):
                return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        return []

    def cpu_seconds(self) -> float | None:
        """Return the CPU time of every process the rollout ran, ended ones included."""
        if self.unified is not None:
            with contextlib.suppress(OSError, ValueError):
                for line in (self.unified / "cpu.stat").read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == "usage_usec":
                        return int(value) / 1e6
        acct = self.v1.get("cpuacct")
        if acct is not None:
            with contextlib.suppress(OSError, ValueError):
                return int((acct / "cpuacct.usage").read_text()) / 1e9
        return None

    def memory_events(self) -> int:
        """Return how many times a process of the set was killed for memory (0 if unknown)."""
        if self.unified is not None and "memory" in self.holds:
            with contextlib.suppress(OSError, ValueError):
                for line in (self.unified / "memory.events").read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        memory = self.v1.get("memory")
        if memory is not None:
            with contextlib.suppress(OSError, ValueError):
                for line in (memory / "memory.oom_control").read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        return 0

    def kill(self) -> None:
        """SIGKILL every process of the set, until none is left (a fork bomb forks meanwhile)."""
        if self.unified is not None and (self.unified / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.unified / "cgroup.kill").write_text("1\n")
        kill_all(self.members, between=lambda: time.sleep(0.005))

    def remove(self) -> None:
        """Kill what is left and remove the groups (a group with members cannot be removed)."""
        self.kill()
        for folder in self.dirs:
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # members still exiting
                    time.sleep(0.01)


class RolloutCgroups:
    """Makes a ``CgroupSet`` per rollout under this process's own groups (root only).

    ``available`` says which of memory, pids, cpu and kill this machine can enforce; an empty
    set means the sandbox works without control groups.
    """

    def __init__(self) -> None:
        self._own = _own_paths() if os.geteuid() == 0 else {}
        self._v2 = _v2_mount() if self._own else None
        self._v1 = {
            name: mount
            for name in ("memory",)
            if self._own and (mount := _v1_mount(name)) is not None and name in self._own
        }
        self.available = self._probe()

    def _probe(self) -> frozenset[str]:
        """Make and remove one group to learn what holds here."""
        try:
            made = self.create(memory_bytes=None, max_processes=None, probe=True)
        except OSError as exc:
            logger.info("no control groups for command agents (%s): resource limits only", exc)
            return frozenset()
        holds = made.holds
        made.remove()
        return holds

    def create(
        self, *, memory_bytes: int | None, max_processes: int | None, probe: bool = False
    ) -> CgroupSet:
        """Make the group of one rollout with its limits; raises ``OSError`` if none can be.

        One hierarchy only: each move of a process into a group costs a few milliseconds
        (the kernel waits for readers of the old one), and a rollout's launcher is moved once.
        cgroup v2 where its memory controller reaches this process's group (memory, processes,
        CPU and kill in one), else v1's memory controller (memory, and its members to kill;
        the CPU time is then read from the launcher's process tree, the process count is the
        rollout user's own), else v2 without controllers (CPU time and kill).
        """
        name = f"fulmen-rollout-{uuid.uuid4().hex[:12]}"
        made = CgroupSet()
        holds: set[str] = set()
        try:
            v2 = self._v2 / self._own[""].lstrip("/") if self._v2 and "" in self._own else None
            use_v2 = v2 is not None and (
                "memory" in _read(v2 / "cgroup.subtree_control").split() or "memory" not in self._v1
            )
            if use_v2 and v2 is not None:
                folder = v2 / name
                folder.mkdir()
                made.unified = folder
                holds.add("cpu")
                if (folder / "memory.max").exists():
                    if memory_bytes is not None or probe:
                        value = str(memory_bytes) if memory_bytes is not None else "max"
                        (folder / "memory.max").write_text(value)
                        with contextlib.suppress(OSError):
                            (folder / "memory.swap.max").write_text("0")
                    holds.add("memory")
                if (folder / "pids.max").exists():
                    if max_processes is not None:
                        (folder / "pids.max").write_text(str(max_processes))
                    holds.add("pids")
            elif "memory" in self._v1:
                folder = self._v1["memory"] / self._own["memory"].lstrip("/") / name
                folder.mkdir()
                made.v1["memory"] = folder
                if memory_bytes is not None:
                    (folder / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    # No swap either, where swap is accounted.
                    with contextlib.suppress(OSError):
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                holds.add("memory")
            else:
                raise OSError("no control group hierarchy this process may write to")
            holds.add("kill")  # cgroup.kill, or each member one by one
        except OSError:
            made.remove()
            raise
        made.holds = frozenset(holds)
        return made


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
