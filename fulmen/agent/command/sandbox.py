"""Run one command in a sandbox: limits, isolation, bounded output, and a kill of the whole tree.

``Sandbox.run`` starts the command through ``launcher.py`` (resource limits, then ``exec``), in
a new session, as the rollout's own user when the runner is root, and with ``bwrap`` inside
its own PID, IPC, UTS, mount and (unless ``network: host``) network namespaces. It reads
stdout and stderr as they come, keeping the first and last bytes of each, and ends the command
at the first of: it exits, its timeout, too much output, too much disk. Ending it kills the
process group, every process of the rollout's user, and (``bwrap``) the PID namespace, so a
command that ignores SIGTERM or left children behind is gone when ``run`` returns.
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
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fulmen.agent.command.access import runnable_by_others
from fulmen.agent.command.config import SandboxConfig
from fulmen.agent.command.gateway_link import GatewayLink

__all__ = ["Finished", "Sandbox", "Status", "inner_port", "interpreter_for"]

logger = logging.getLogger(__name__)

Status = Literal["exited", "timeout", "output_limit", "disk_limit", "cpu_limit", "file_limit"]

_HERE = Path(__file__).resolve().parent
_LAUNCHER, _RELAY = _HERE / "launcher.py", _HERE / "relay.py"
_MB = 1024 * 1024
_SIGNAL_STATUS: dict[int, Status] = {
    128 + signal.SIGXCPU: "cpu_limit",
    128 + signal.SIGXFSZ: "file_limit",
}


@dataclass(frozen=True)
class Finished:
    """How a command ended.

    Attributes:
        status: ``exited`` (it ended by itself; see ``exit_code``), or why it was killed:
            ``timeout``, ``output_limit``, ``disk_limit``, ``cpu_limit``, ``file_limit``.
        exit_code: its exit status (``128 + N`` when signal N ended it), ``None`` if killed.
        stdout / stderr: what it printed, the middle cut out past the kept size.
        output_bytes: how many bytes it printed in all.
        duration_s: wall time from start to end.
    """

    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    output_bytes: int
    duration_s: float


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


def _dir_bytes(path: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def inner_port(port: int) -> int:
    """Return the relay's port in the sandbox: the gateway's, unless only root may bind it."""
    return port if port >= 1024 else 18080


def interpreter_for(uid: int | None) -> str:
    """Return a Python that runs ``launcher.py``/``relay.py`` as ``uid`` (stdlib only)."""
    if uid is None or runnable_by_others(sys.executable):
        return sys.executable
    for name in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3")):
        if name and Path(name).exists() and runnable_by_others(name):
            return name
    raise RuntimeError(
        f"no Python that another user may run ({sys.executable} is not): command agents run as "
        "a user of their own under root; install python3 system-wide or set sandbox.user: runner"
    )


def _user_processes(uid: int) -> list[int]:
    pids: list[int] = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


class Sandbox:
    """Runs commands under one ``SandboxConfig``; the backend is resolved once, here."""

    def __init__(self, config: SandboxConfig, base: Path) -> None:
        """Resolve the backend; ``base`` is the folder that holds every rollout's directory."""
        self.config, self.base = config, base
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

    @property
    def level(self) -> str:
        """A short description of the isolation in force (stored with each attempt)."""
        if self.backend == "process":
            return "process: own session and resource limits; shared network and file system"
        return f"bwrap: own PID/mount namespaces, read-only system, network {self.network}"

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
            args += ["--limit", f"nproc={config.max_processes + already}"]
        return args

    def _exposed(self, paths: list[str]) -> list[Path]:
        """Return the folders directly under ``/tmp`` that hold ``paths`` (or their real paths).

        The private ``/tmp`` hides the machine's; a program, script or config folder that
        lives there (a checkout under ``/tmp``) is mounted back, read-only, by its top folder.
        The rollouts' own base folder never is.
        """
        tmp = Path("/tmp")
        found: set[Path] = set()
        for text in paths:
            if not text.startswith("/"):
                continue
            for path in {Path(text), Path(os.path.realpath(text))}:
                if path.is_relative_to(tmp) and path != tmp and path.exists():
                    top = tmp / path.relative_to(tmp).parts[0]
                    if not (self.base.is_relative_to(top) or top.is_relative_to(self.base)):
                        found.add(top)
        return sorted(found)

    def _bwrap_args(
        self, root: Path, cwd: Path, env: dict[str, str], expose: list[str]
    ) -> list[str]:
        args = [self._bwrap, "--die-with-parent", "--new-session", "--unshare-pid"]
        args += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if self.network != "host":
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if self.config.disk_mb is not None:
            args += ["--size", str(self.config.disk_mb * _MB)]
        args += ["--tmpfs", "/tmp"]
        for path in self._exposed(expose):
            args += ["--ro-bind", str(path), str(path)]
        for path in [self.base, *self.config.hidden_paths]:  # other rollouts, the user's list
            if path.exists():
                args += ["--tmpfs", str(path)]
        args += ["--ro-bind", str(self._bin), str(self._bin)]
        args += ["--bind", str(root), str(root), "--chdir", str(cwd), "--clearenv"]
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
    ) -> Finished:
        """Run ``argv`` in ``cwd`` (inside the rollout directory ``root``) until it ends.

        ``gateway`` is the one address the command may reach (``network: gateway``);
        ``network=False`` cuts even that (a verifier needs no model). ``expose`` names paths
        the command needs to read although they lie under ``/tmp`` (besides ``argv``'s).
        """
        command = list(argv)
        link: GatewayLink | None = None
        if self.backend == "bwrap":
            if self.network == "gateway" and gateway is not None and network:
                link = GatewayLink(root / ".gw.sock", *gateway, uid=uid)
                relay = [interpreter_for(uid), "-I", "-S", str(self._bin / _RELAY.name)]
                relay.append(str(inner_port(gateway[1])))
                command = [*relay, str(link.path), "--", *command]
            needed = [*argv, *(expose or [])]
            command = [*self._bwrap_args(root, cwd, env, needed), *command]
        python = interpreter_for(uid)
        launcher = str(self._bin / _LAUNCHER.name)
        launch = [python, "-I", "-S", launcher, *self._limits(uid), "--", *command]
        ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        async with contextlib.AsyncExitStack() as stack:
            if link is not None:
                await stack.enter_async_context(link)
            return await self._supervise(launch, env, cwd, stdin, timeout_s, uid, ids)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _supervise(
        self,
        launch: list[str],
        env: dict[str, str],
        cwd: Path,
        stdin: bytes | None,
        timeout_s: float,
        uid: int | None,
        ids: dict[str, object],
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
        keep = self.config.keep_output_bytes
        out, err = _Capture(keep), _Capture(keep)
        stopped: list[Status] = []
        over = asyncio.Event()
        transports: list[asyncio.BaseTransport] = []

        async def read(fd: int, capture: _Capture) -> None:
            reader = asyncio.StreamReader()
            pipe = os.fdopen(fd, "rb", buffering=0)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
            transports.append(transport)
            while data := await reader.read(65536):
                capture.add(data)
                if out.size + err.size > self.config.output_bytes and not over.is_set():
                    stopped.append("output_limit")
                    over.set()

        async def watch_disk() -> None:
            limit = self.config.disk_mb
            if limit is None:
                return
            while True:
                await asyncio.sleep(self.config.disk_check_s)
                if await asyncio.to_thread(_dir_bytes, cwd.parent) > limit * _MB:
                    stopped.append("disk_limit")
                    over.set()
                    return

        readers = [asyncio.create_task(read(out_r, out)), asyncio.create_task(read(err_r, err))]
        disk = asyncio.create_task(watch_disk())
        waiter = asyncio.create_task(process.wait())
        limit = asyncio.create_task(over.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, limit}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                if not stopped:
                    stopped.append("timeout")
                self._kill(process.pid, uid)
            await waiter
            # What the command left in the pipes; a child that escaped may hold them open.
            await asyncio.wait(readers, timeout=1.0)
        finally:
            # Also when the rollout itself is cancelled: nothing of the command outlives this.
            self._kill(process.pid, uid)
            for task in [*readers, disk, limit]:
                task.cancel()
            for transport in transports:
                transport.close()
            if not waiter.done():
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        code = process.returncode
        assert code is not None
        code = 128 - code if code < 0 else code
        status: Status = stopped[0] if stopped else _SIGNAL_STATUS.get(code, "exited")
        return Finished(
            status=status,
            exit_code=None if stopped else code,
            stdout=out.text(),
            stderr=err.text(),
            output_bytes=out.size + err.size,
            duration_s=time.monotonic() - started,
        )

    def _kill(self, pid: int, uid: int | None) -> None:
        """SIGKILL the command's process group and, with a user of its own, every process of it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if uid is None:
            return
        for _ in range(100):  # a fork bomb forks while it is killed: go again until none is left
            pids = _user_processes(uid)
            if not pids:
                return
            for other in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(other, signal.SIGKILL)
