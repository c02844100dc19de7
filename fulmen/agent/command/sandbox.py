"""Run one command in a sandbox: limits, isolation, bounded output, and a kill of the whole tree.

``Sandbox.run`` starts the command through ``launcher.py`` (resource limits, a subreaper that
no process of the command escapes), in a new session, as the rollout's own user when the runner
is root, in control groups of its own where the machine has them (``cgroups.py``: memory of the
whole rollout, its process count, its CPU time), and with ``bwrap`` inside its own PID, IPC,
UTS, mount and (unless ``network: host``) network namespaces. It reads stdout and stderr as they
come, keeping the first and last bytes of each, and ends the command at the first of: it exits,
its timeout, too much output, too much disk or too many files, its CPU budget. Ending it kills
the control groups, the launcher's descendants, the process group and every process of the
rollout's user, so a command that ignores SIGTERM or left children behind is gone when ``run``
returns. ``docs/security.md`` states what each backend holds against.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fulmen.agent.command import tree
from fulmen.agent.command.access import runnable_by_others
from fulmen.agent.command.cgroups import CgroupSet, RolloutCgroups
from fulmen.agent.command.config import SandboxConfig
from fulmen.agent.command.gateway_link import GatewayLink
from fulmen.agent.command.launcher import descendants, kill_all, stat_fields

__all__ = ["INSIDE", "Finished", "Sandbox", "Status", "inner_port", "interpreter_for"]

logger = logging.getLogger(__name__)

Status = Literal[
    "exited",
    "timeout",
    "output_limit",
    "disk_limit",
    "files_limit",
    "cpu_limit",
    "memory_limit",
    "file_limit",
]

_HERE = Path(__file__).resolve().parent
INSIDE = Path("/home/rollout")
"""Where ``bwrap`` shows every rollout its own directory (``/home`` is the sandbox's own)."""
_INSIDE_BIN = Path("/home/.fulmen")
# The folders a sandbox gets empty ones of its own for; what a command needs there (its
# program under /tmp or a user's home) is mounted back by its top folder.
_PRIVATE = (Path("/tmp"), Path("/home"))
_LAUNCHER, _RELAY = _HERE / "launcher.py", _HERE / "relay.py"
_MB = 1024 * 1024
_SIGNAL_STATUS: dict[int, Status] = {
    128 + signal.SIGXCPU: "cpu_limit",
    128 + signal.SIGXFSZ: "file_limit",
}
# Processes of the sandbox's own making, besides the command's: the launcher, bwrap's two and
# the relay. A process limit counts them too.
_OWN_PROCESSES = 4
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Finished:
    """How a command ended.

    Attributes:
        status: ``exited`` (it ended by itself; see ``exit_code``), or why it was killed:
            ``timeout``, ``output_limit``, ``disk_limit``, ``files_limit``, ``cpu_limit``,
            ``memory_limit``, ``file_limit``.
        exit_code: its exit status (``128 + N`` when signal N ended it), ``None`` if killed.
        stdout / stderr: what it printed, the middle cut out past the kept size.
        output_bytes: how many bytes it printed in all.
        duration_s: wall time from start to end.
        started: whether the command itself ever ran (``False``: the sandbox could not start
            it: a program missing inside the sandbox, bwrap refusing a mount, ...).
    """

    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    output_bytes: int
    duration_s: float
    started: bool = True


class _Capture:
    """The first and last ``keep`` bytes of a stream; the byte count shared by both streams."""

    def __init__(self, keep: int) -> None:
        self.keep, self.head, self.tail, self.size = keep, bytearray(), deque[bytes](), 0
        self._tail_size = 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self._tail_size += len(data)
            while self._tail_size - len(self.tail[0]) >= self.keep:
                self._tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        tail = b"".join(self.tail)[-self.keep :]
        cut = self.size - len(self.head) - len(tail)
        middle = f"\n[... {cut} bytes not kept ...]\n".encode() if cut > 0 else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", "replace")


def inner_port(port: int) -> int:
    """Return the relay's port in the sandbox: the gateway's, unless only root may bind it."""
    return port if port >= 1024 else 18080


def interpreter_for(uid: int | None) -> str:
    """Return a Python that runs ``launcher.py``/``relay.py`` as ``uid`` (stdlib only).

    The base interpreter, not a virtual environment's link to it: the scripts need only the
    standard library, and the runner's environment may then be hidden from the sandbox (or
    lie where the sandbox does not show it, under ``/tmp`` say).
    """
    base = os.path.realpath(sys.executable)
    if uid is None or runnable_by_others(base):
        return base
    for name in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3")):
        if name and Path(name).exists() and runnable_by_others(name):
            return os.path.realpath(name)
    raise RuntimeError(
        f"no Python that another user may run ({base} is not): command agents run as a user "
        "of their own under root; install python3 system-wide"
    )


def _user_processes(uid: int) -> list[int]:
    pids: list[int] = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


def _tree_cpu_seconds(root: int) -> float:
    """CPU time of ``root`` and every live process below it, with the children they reaped.

    The launcher is a subreaper: every ended process of the command was reaped by it or by a
    live ancestor, so its time is in some live process's ``cutime``/``cstime``.
    """
    ticks = 0
    for pid in (root, *descendants(root)):
        fields = stat_fields(pid)
        if fields is not None:
            ticks += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return ticks / _CLOCK_TICKS


class Sandbox:
    """Runs commands under one ``SandboxConfig``; the backend is resolved once, here.

    Args:
        config: the sandbox section.
        base: the folder that holds every rollout's directory.
        hidden: paths of the runner's own that no command may see (with ``bwrap``): the run
            folder, the store, the runner's virtual environment; added to
            ``config.hidden_paths``.
    """

    def __init__(self, config: SandboxConfig, base: Path, *, hidden: Sequence[Path] = ()) -> None:
        self.config, self.base = config, base
        self.hidden = [*config.hidden_paths, *hidden]
        # The two helper scripts, where a rollout's own user can read them (the installed
        # package may sit under a folder only root enters).
        self._bin = base / "bin"
        self._bin.mkdir(mode=0o755, exist_ok=True)
        for script in (_LAUNCHER, _RELAY):
            shutil.copyfile(script, self._bin / script.name)
            os.chmod(self._bin / script.name, 0o644)
        bwrap = shutil.which("bwrap")
        backend = config.backend
        if backend == "bwrap" and bwrap is None:
            raise RuntimeError(
                "sandbox.backend is bwrap but bubblewrap is not installed "
                "(apt-get install bubblewrap), or choose backend: process"
            )
        if backend == "auto":
            backend = "bwrap" if bwrap is not None else "process"
            if bwrap is None:
                logger.warning(
                    "command agents run with sandbox backend 'process': bubblewrap is not "
                    "installed, so commands share this machine's network and file system "
                    "(apt-get install bubblewrap, or set sandbox.backend: process to silence this)"
                )
        self.backend: Literal["bwrap", "process"] = backend
        self.network = config.network if backend == "bwrap" else "host"
        self._bwrap = bwrap or "bwrap"
        self.is_root = os.geteuid() == 0
        self.cgroups = RolloutCgroups() if config.cgroups else None
        if self.cgroups is not None and not self.cgroups.available:
            self.cgroups = None

    @property
    def level(self) -> str:
        """A short description of the isolation in force (stored with each attempt)."""
        groups = self.cgroups.available if self.cgroups is not None else frozenset()
        held = f"; control groups: {', '.join(sorted(groups))}" if groups else ""
        if self.backend == "process":
            return f"process: own session and resource limits{held}; shared network and file system"
        return f"bwrap: own PID/mount namespaces, read-only system, network {self.network}{held}"

    def _limits(self, uid: int | None, *, cpu: bool = True) -> list[str]:
        config, args = self.config, ["--limit", "core=0"]
        if config.memory_mb is not None:
            args += ["--limit", f"data={config.memory_mb * _MB}"]
        if config.cpu_s is not None and cpu:
            args += ["--limit", f"cpu={config.cpu_s}"]
        if config.max_file_mb is not None:
            args += ["--limit", f"fsize={config.max_file_mb * _MB}"]
        if config.max_processes is not None:
            already = 0 if uid is not None else len(_user_processes(os.getuid()))
            args += ["--limit", f"nproc={config.max_processes + _OWN_PROCESSES + already}"]
        return args

    def _visible(self, paths: list[str]) -> list[Path]:
        """Return the top folders under ``/tmp`` or ``/home`` that hold ``paths`` (real too).

        The sandbox's ``/tmp`` is the rollout's own and its ``/home`` empty; a program, script,
        virtual environment or config folder that lives under the machine's (a checkout made
        with ``mktemp -d``, a user's project) is mounted back, read-only, by its top folder, so
        that what lies beside it (a virtual environment's ``pyvenv.cfg``, a script's modules)
        comes too. The rollouts' base and the hidden paths are mounted over afterwards, so
        they stay hidden even inside such a folder.
        """
        found: set[Path] = set()
        for text in paths:
            if not text.startswith("/"):
                continue
            for path in {Path(text), Path(os.path.realpath(text))}:
                for private in _PRIVATE:
                    if path.is_relative_to(private) and path != private and path.exists():
                        top = private / path.relative_to(private).parts[0]
                        if top not in (INSIDE, _INSIDE_BIN) and not top.is_relative_to(self.base):
                            found.add(top)
        return sorted(found)

    def view(self, root: Path, path: Path) -> Path:
        """Return where the command sees ``path`` (in the rollout directory ``root``).

        With ``bwrap`` every rollout's directory is at the same path, ``/rollout`` (so
        identical agents write identical prompts, and an engine's prefix cache serves them
        all); with ``process`` paths are the machine's own.
        """
        if self.backend != "bwrap":
            return path
        return INSIDE / path.relative_to(root)

    def _bwrap_args(
        self,
        root: Path,
        env: dict[str, str],
        expose: list[str],
        *,
        cwd: Path,
        writable: Path,
        tmp: Path,
    ) -> list[str]:
        config = self.config
        args = [self._bwrap, "--die-with-parent", "--new-session", "--unshare-pid"]
        args += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if self.network != "host":
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        # /dev is a tmpfs of bwrap's: shared memory gets one of its own, sized, and /dev itself
        # is made read-only below (unsized tmpfs mounts may grow to half the machine's memory).
        shm_mb = min(config.memory_mb or 64, 1024)
        args += ["--perms", "1777", "--size", str(shm_mb * _MB), "--tmpfs", "/dev/shm"]
        # /tmp is the rollout's own folder, counted with its disk and files; /home is empty
        # (other users' files) but for the rollout's own directory.
        args += ["--bind", str(tmp), "/tmp", "--size", str(_MB), "--tmpfs", "/home"]
        visible = self._visible(expose)
        for path in visible:
            args += ["--ro-bind", str(path), str(path)]
        # Hidden behind an empty read-only folder: the host's sockets under /run (with no
        # network of the host the abstract ones are out of reach already), the rollouts'
        # base (other rollouts), the runner's own paths. Under /tmp only what an exposed
        # folder brought back needs it.
        hidden = [Path("/run"), Path("/var/run")] if self.network != "host" else []
        hidden += [self.base, *self.hidden]
        read_only: list[str] = ["/dev", "/home"]
        for path in hidden:
            private = any(path.is_relative_to(p) for p in _PRIVATE)
            shown = not private or any(path.is_relative_to(v) for v in visible)
            if shown and path.exists() and not path.is_symlink():
                args += ["--size", str(_MB), "--tmpfs", str(path)]
                read_only.append(str(path))
        args += ["--ro-bind", str(self._bin), str(_INSIDE_BIN)]
        if writable == root:
            args += ["--bind", str(root), str(INSIDE)]
        else:  # the verifier: the rollout's files to read, a folder of its own to write
            inside = str(self.view(root, writable))
            args += ["--ro-bind", str(root), str(INSIDE), "--bind", str(writable), inside]
        for path in read_only:
            args += ["--remount-ro", path]
        args += ["--chdir", str(self.view(root, cwd)), "--clearenv"]
        for name, value in env.items():
            args += ["--setenv", name, value]
        return [*args, "--"]

    async def run(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        root: Path,
        cwd: Path,
        uid: int | None,
        stdin: bytes | None,
        timeout_s: float,
        gateway: tuple[str, int] | None,
        network: bool = True,
        expose: list[str] | None = None,
        writable: Path | None = None,
        tmp: Path | None = None,
    ) -> Finished:
        """Run ``argv`` in ``cwd`` (inside the rollout directory ``root``) until it ends.

        Paths are the machine's; ``argv`` and ``env`` name them as the command sees them
        (``view``). ``gateway`` is the one address the command may reach (``network:
        gateway``); ``network=False`` cuts even that (a verifier needs no model). ``expose``
        names the paths the command needs to read although they lie under ``/tmp`` (its
        program, its config folder): never a path a task filled in. ``writable`` (default
        ``root``) is the one folder the command may write (with ``bwrap``: the rest of
        ``root`` is then read-only), ``tmp`` the folder that is its ``/tmp`` (default
        ``root/tmp``).
        """
        writable = writable or root
        tmp = tmp or root / "tmp"
        marker = writable / f".started-{uuid.uuid4().hex[:8]}"
        command = list(argv)
        link: GatewayLink | None = None
        launch_marker: list[str] = []
        if self.backend == "bwrap":
            starter = [interpreter_for(uid), "-I", "-S", str(_INSIDE_BIN / _RELAY.name)]
            if self.network == "gateway" and gateway is not None and network:
                link = GatewayLink(
                    root / ".gw.sock",
                    *gateway,
                    uid=uid,
                    max_connections=self.config.max_connections,
                )
                inner = str(self.view(root, link.path))
                starter += ["--listen", str(inner_port(gateway[1])), inner]
            # The marker is written inside the sandbox once the command runs: a relay or
            # program that bwrap could not start leaves none.
            command = [*starter, "--marker", str(self.view(root, marker)), "--", *command]
            needed = [*(expose or []), starter[0]]
            if Path(starter[0]).is_relative_to(sys.base_prefix):
                needed.append(sys.base_prefix)  # an interpreter needs its standard library
            args = self._bwrap_args(root, env, needed, cwd=cwd, writable=writable, tmp=tmp)
            command = [*args, *command]
        else:
            launch_marker = ["--marker", str(marker)]
        python = interpreter_for(uid)
        launcher = str(self._bin / _LAUNCHER.name)
        groups = self._cgroups()
        go_read, go_write = os.pipe() if groups is not None else (None, None)
        go = ["--go-fd", str(go_read)] if go_read is not None else []
        launch = [python, "-I", "-S", launcher, *go, *launch_marker, *self._limits(uid)]
        launch += ["--", *command]
        ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        try:
            async with contextlib.AsyncExitStack() as stack:
                if link is not None:
                    await stack.enter_async_context(link)
                finished = await self._supervise(
                    launch, env, cwd, stdin, timeout_s, uid, ids, groups, (go_read, go_write)
                )
        finally:
            for fd in (go_read, go_write):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            if groups is not None:
                await asyncio.to_thread(groups.remove)
        started = marker.exists()
        with contextlib.suppress(OSError):
            marker.unlink()
        if not started:
            finished = Finished(**{**finished.__dict__, "started": False})
        return finished

    def _cgroups(self) -> CgroupSet | None:
        if self.cgroups is None:
            return None
        config = self.config
        processes = config.max_processes
        return self.cgroups.create(
            memory_bytes=config.memory_mb * _MB if config.memory_mb is not None else None,
            max_processes=processes + _OWN_PROCESSES if processes is not None else None,
        )

    async def _supervise(
        self,
        launch: list[str],
        env: dict[str, str],
        cwd: Path,
        stdin: bytes | None,
        timeout_s: float,
        uid: int | None,
        ids: dict[str, object],
        groups: CgroupSet | None,
        go: tuple[int | None, int | None],
    ) -> Finished:
        # Pipes of our own rather than asyncio's: its ``wait()`` also waits for the pipes to
        # close, which a child that left the process group can delay forever.
        loop = asyncio.get_running_loop()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin_file = tempfile.TemporaryFile() if stdin is not None else None  # noqa: SIM115
        if stdin_file is not None and stdin is not None:
            stdin_file.write(stdin)
            stdin_file.seek(0)
        go_read, go_write = go
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *launch,
                stdin=stdin_file if stdin_file is not None else asyncio.subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd=cwd,
                env=env,
                start_new_session=True,
                pass_fds=(go_read,) if go_read is not None else (),
                **ids,  # type: ignore[arg-type]  # user/group/extra_groups (Python 3.9+)
            )
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
            if stdin_file is not None:
                stdin_file.close()
        if groups is not None and go_write is not None:
            # Into the rollout's groups before it starts anything: then it may go on.
            # (In a thread: the move waits for the launcher's exec to finish, milliseconds.)
            try:
                await asyncio.to_thread(groups.place, process.pid)
            finally:
                os.write(go_write, b"1")
        keep = self.config.keep_output_bytes
        out, err = _Capture(keep), _Capture(keep)
        stopped: list[Status] = []
        over = asyncio.Event()
        transports: list[asyncio.BaseTransport] = []

        def stop(status: Status) -> None:
            if not over.is_set():
                stopped.append(status)
                over.set()

        async def read(fd: int, capture: _Capture) -> None:
            reader = asyncio.StreamReader()
            pipe = os.fdopen(fd, "rb", buffering=0)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
            transports.append(transport)
            while data := await reader.read(65536):
                capture.add(data)
                if out.size + err.size > self.config.output_bytes:
                    stop("output_limit")

        async def watch() -> None:
            """Disk, files and the CPU budget, every ``disk_check_s``."""
            config = self.config
            disk = config.disk_mb * _MB if config.disk_mb is not None else None
            files = config.max_files
            while True:
                await asyncio.sleep(config.disk_check_s)
                if disk is not None or files is not None:
                    usage = await asyncio.to_thread(
                        tree.measure, cwd.parent, max_bytes=disk, max_entries=files
                    )
                    if disk is not None and usage.bytes > disk:
                        stop("disk_limit")
                        return
                    if usage.too_deep or (files is not None and usage.entries > files):
                        stop("files_limit")
                        return
                if config.cpu_s is not None and self._cpu_seconds(process.pid, groups) > (
                    config.cpu_s
                ):
                    stop("cpu_limit")
                    return

        readers = [asyncio.create_task(read(out_r, out)), asyncio.create_task(read(err_r, err))]
        watcher = asyncio.create_task(watch())
        waiter = asyncio.create_task(process.wait())
        limit = asyncio.create_task(over.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, limit}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                if not stopped:
                    stopped.append("timeout")
                await asyncio.to_thread(self._kill, process.pid, uid, groups, True)
            await waiter
            # What the command left in the pipes; a child that escaped may hold them open.
            await asyncio.wait(readers, timeout=1.0)
        finally:
            # Also when the rollout itself is cancelled: nothing of the command outlives this.
            self._kill(process.pid, uid, groups, process.returncode is None)
            for task in [*readers, watcher, limit]:
                task.cancel()
            for transport in transports:
                transport.close()
            if not waiter.done():
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        code = process.returncode
        assert code is not None
        code = 128 - code if code < 0 else code
        if not stopped and groups is not None and groups.memory_events() > 0:
            stopped.append("memory_limit")
        status: Status = stopped[0] if stopped else _SIGNAL_STATUS.get(code, "exited")
        return Finished(
            status=status,
            exit_code=None if stopped else code,
            stdout=out.text(),
            stderr=err.text(),
            output_bytes=out.size + err.size,
            duration_s=time.monotonic() - started,
        )

    @staticmethod
    def _cpu_seconds(pid: int, groups: CgroupSet | None) -> float:
        if groups is not None:
            measured = groups.cpu_seconds()
            if measured is not None:
                return measured
        return _tree_cpu_seconds(pid)

    def _kill(self, pid: int, uid: int | None, groups: CgroupSet | None, alive: bool) -> None:
        """SIGKILL every process of the command: its groups, the launcher's tree, its user's.

        ``alive``: the launcher ``pid`` is not reaped yet. Once it is, its id may belong to
        another process; it killed what it left behind itself before it exited (a subreaper).
        """
        if groups is not None:
            groups.kill()
        if alive:
            # Below the launcher first (a subreaper: no process of the command left its
            # tree), then the launcher and its process group.
            kill_all(lambda: descendants(pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if uid is not None:
            kill_all(lambda: _user_processes(uid))
