"""A pre-imported Python that forks the suite's fulmen processes instead of starting them cold.

Most of the CPU a whole ``fulmen train`` costs in this suite is imports: a fresh trainer spends
about 11 CPU-s importing torch, transformers and peft, a fresh built-in engine about 8, before
either does any work (``docs/testing.md``). A test run starts such processes hundreds of times.
This server imports those modules once, then forks a child for each process asked of it; the
child takes the asker's standard streams, working directory, environment and arguments and runs
``python -m MODULE ARGS`` in the state a fresh interpreter would reach after the same imports.

The asker is this file run with the arguments ``python`` would get (``prefork.py -m MODULE
ARGS``), through a small executable ``tests/conftest.py`` writes and hands fulmen as the Python
of its child processes (``FULMEN_PYTHON``); tests start their own ``fulmen`` commands with it
too (``python()``). It behaves as ``python`` would for its caller: exit status, signals,
standard streams. A request the server cannot serve as faithfully as a fresh
interpreter gets ``fallback`` and the asker runs the real interpreter: anything but
``-m fulmen...``, or an environment that differs from the server's in a variable read at import
time (``HF_HOME``, ``TORCH_HOME``, ...), or a ``PYTHONPATH`` under which a preloaded package would
import from another file.

``tests/conftest.py`` starts one server for a test run (``Launched``; under pytest-xdist the
controller does, before its workers, which inherit its variables); it stops with that process.
``FULMEN_TEST_PREFORK=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# What a fresh trainer (``python -m fulmen train``) and a fresh built-in engine
# (``python -m fulmen.cli.serve``) spend their start-up importing.
PRELOAD = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "peft",
    "uvicorn",
    "fastapi",
    "httpx",
    "fulmen.cli",
    "fulmen.cli.serve",
    "fulmen.cli.train",
    "fulmen.engines.builtin.server",
    "fulmen.engines.builtin.model",
    "fulmen.trainer.trainer",
    "fulmen.algorithms.parallel.rank_main",
)
# Variables read at import time by the preloaded modules or the interpreter's start: a request
# whose values differ from the server's gets ``fallback``.
_IMPORT_TIME = (
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "TOKENIZERS",
    "TORCH",
    "PYTORCH",
    "OMP_",
    "MKL_",
    "KMP_",
    "CUDA",
    "NCCL",
    "PYTHON",
    "LD_",
    "MALLOC_",
    "XDG_CACHE_HOME",
    "HOME",
)
# Python reads these at start too, but a child can apply them itself; torch reads its compile
# caches' folders when it uses them (and sets them to their defaults in a process that does).
_APPLIED = frozenset(
    {"PYTHONUNBUFFERED", "PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
)
# Only fulmen's own processes are forked; anything else runs on the real interpreter.
MODULES = ("fulmen",)
_HEADER = struct.Struct("!I")
#: Where an asker finds the server (set by ``tests/conftest.py``).
SOCKET_VARIABLE = "FULMEN_TEST_PREFORK_SOCKET"
_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def read_message(sock: socket.socket, *, fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """Read one length-prefixed JSON message (and up to ``fds`` descriptors passed with it)."""
    if fds:
        data, received, _, _ = socket.recv_fds(sock, _HEADER.size, fds)
    else:
        data, received = sock.recv(_HEADER.size), []
    while 0 < len(data) < _HEADER.size:
        data += sock.recv(_HEADER.size - len(data))
    if not data:
        raise EOFError
    (size,) = _HEADER.unpack(data)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise EOFError
        body += chunk
    return json.loads(body), list(received)


def write_message(sock: socket.socket, message: dict[str, Any], *, fds: Sequence[int] = ()) -> None:
    """Write one length-prefixed JSON message, passing ``fds`` with its first bytes."""
    body = json.dumps(message).encode()
    header = _HEADER.pack(len(body))
    if fds:
        socket.send_fds(sock, [header], fds)
    else:
        sock.sendall(header)
    sock.sendall(body)


def process_context() -> dict[str, Any]:
    """What a child inherits from its process besides the environment: a fork gets the server's.

    Namespaces (a network namespace of its own, a sandbox's mounts), user and groups, resource
    limits, control group, umask and the CPUs it may run on.
    """
    import resource

    context: dict[str, Any] = {
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())],
        "cpus": sorted(os.sched_getaffinity(0)),
    }
    for name in ("net", "mnt", "pid", "uts", "ipc", "user", "cgroup"):
        with contextlib.suppress(OSError):
            context[f"ns/{name}"] = os.readlink(f"/proc/self/ns/{name}")
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as cgroup:
        context["cgroup"] = cgroup.read()
    mask = os.umask(0)
    os.umask(mask)
    context["umask"] = mask
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            context[name] = list(resource.getrlimit(getattr(resource, name)))
    return context


def _import_time_environment(env: dict[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in env.items()
        if key.startswith(_IMPORT_TIME) and key not in _APPLIED
    }


@dataclass
class Job:
    """What a forked child runs: ``python -m module args`` where and as its asker would."""

    module: str
    args: list[str]
    cwd: str
    env: dict[str, str]
    fds: list[int]


class Server:
    """Forks children for requests on a Unix socket and reports how each ended.

    Args:
        path: the socket's path.
        parent: the pid whose exit stops the server (and kills the children it still has).
        preload: the modules imported before serving.
        modules: the packages whose ``-m`` runs are forked (others get ``fallback``).
    """

    def __init__(
        self,
        path: str,
        parent: int,
        *,
        preload: Sequence[str] = PRELOAD,
        modules: Sequence[str] = MODULES,
    ) -> None:
        self.parent = parent
        self.to_preload = tuple(preload)
        self.modules = tuple(modules)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.path = path
        self.environment = _import_time_environment(dict(os.environ))
        # The search path without [0] (this file's folder; a child's is its cwd) and without
        # this process's PYTHONPATH: a child's comes from its own.
        own = set(_python_path(os.environ.get("PYTHONPATH", "")))
        self.sys_path = [entry for entry in sys.path[1:] if entry not in own]
        self.preloaded: dict[str, str] = {}
        self.children: dict[int, socket.socket] = {}
        self.selector = selectors.DefaultSelector()
        self.stopping = False

    def preload(self) -> None:
        """Import the preloaded modules (requests wait in the socket's backlog meanwhile)."""
        for name in self.to_preload:
            with contextlib.suppress(ImportError):  # not in this environment: a child imports it
                __import__(name)
        self.preloaded = {
            name: str(getattr(sys.modules[name], "__file__", ""))
            for name in ("fulmen", "torch", "transformers", "peft")
            if name in sys.modules
        }

    def refusal(self, request: dict[str, Any]) -> str | None:
        """Why ``request`` must run on the real interpreter, or ``None`` when it may fork."""
        args = request["args"]
        if len(args) < 2 or args[0] != "-m":
            return "not 'python -m MODULE'"
        if not (
            args[1] in self.modules or args[1].startswith(tuple(m + "." for m in self.modules))
        ):
            return f"{args[1]} is not fulmen's"
        here = process_context()
        other = request.get("context", {})
        unlike = sorted(k for k in here.keys() | other.keys() if here.get(k) != other.get(k))
        if unlike:  # a sandbox, another network namespace, other limits: not what a fork gets
            return f"the asker's process differs: {', '.join(unlike)}"
        asked = _import_time_environment(request["env"])
        differ = sorted(
            k
            for k in asked.keys() | self.environment.keys()
            if asked.get(k) != self.environment.get(k)
        )
        if differ:
            return f"import-time variables differ: {', '.join(differ)}"
        if threading.active_count() > 1:
            return "the server has threads"
        search = child_sys_path(request["cwd"], request["env"], self.sys_path)
        for name, file in self.preloaded.items():
            origin = _origin(name, search)
            if origin != file:
                return f"{name} would import from {origin or 'nowhere'}"
        return None

    def serve(self) -> Job:
        """Serve requests until stopped (then exit); returns only in a forked child."""
        signal.signal(signal.SIGTERM, self._stop)
        self.selector.register(self.listener, selectors.EVENT_READ)
        while not self.stopping and os.getppid() == self.parent:
            for key, _ in self.selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.listener:
                    job = self._accept()
                    if job is not None:
                        return job
                else:
                    self._asker_gone(sock)
            self._reap()
        for pid in list(self.children):
            _kill(pid)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        sys.exit(0)

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _accept(self) -> Job | None:
        conn, _ = self.listener.accept()
        conn.settimeout(10)  # an asker that stalls must not hold up the others
        try:
            request, fds = read_message(conn, fds=3)
        except (EOFError, OSError, ValueError):
            conn.close()
            return None
        why = self.refusal(request)
        said = " ".join(request["args"][:3])
        print(f"prefork: {said}: " + (f"fallback, {why}" if why else "fork"), file=sys.stderr)
        if why is not None or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                write_message(conn, {"fallback": why or "streams missing"})
            conn.close()
            return None
        pid = os.fork()
        if pid == 0:
            return self._become_child(conn, request, fds)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ)
        with contextlib.suppress(OSError):
            write_message(conn, {"pid": pid})
        return None

    def _become_child(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> Job:
        os.setsid()
        for sock in (self.listener, conn, *self.children.values()):
            sock.close()
        self.selector.close()
        for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        args = request["args"]
        return Job(module=args[1], args=args[2:], cwd=request["cwd"], env=request["env"], fds=fds)

    def _asker_gone(self, conn: socket.socket) -> None:
        """An asker that ends before its child (SIGKILL) takes the child with it."""
        with contextlib.suppress(OSError):
            if conn.recv(1):
                return
        for pid, held in self.children.items():
            if held is conn:
                _kill(pid)
        self.selector.unregister(conn)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            with contextlib.suppress(OSError, KeyError, ValueError):
                write_message(conn, {"status": status})
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            conn.close()


def _origin(name: str, search: list[str]) -> str | None:
    """The file a fresh interpreter with ``search`` as its path would import ``name`` from.

    The meta path in order, as the import system asks it: the path finder looks in ``search``,
    the others (an editable install's finder) answer as they would anywhere.
    """
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is PathFinder:
            spec = PathFinder.find_spec(name, search)
        else:
            find = getattr(finder, "find_spec", None)
            spec = find(name, None) if find is not None else None
        if spec is not None:
            return spec.origin
    return None


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _streams(unbuffered: bool) -> None:
    """Standard streams over descriptors 0-2 as a fresh interpreter would build them."""
    encoding, errors = sys.stdout.encoding, sys.stdout.errors

    def text(fd: int, mode: str, *, line: bool, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered: Any = (
            io.BufferedReader(raw)
            if mode == "rb"
            else raw
            if unbuffered
            else io.BufferedWriter(raw)
        )
        return io.TextIOWrapper(
            buffered,
            encoding=encoding,
            errors=errors,
            line_buffering=line,
            write_through=unbuffered and mode != "rb",
        )

    sys.stdin = sys.__stdin__ = text(0, "rb", line=os.isatty(0), errors=errors)
    sys.stdout = sys.__stdout__ = text(1, "wb", line=os.isatty(1), errors=errors)
    sys.stderr = sys.__stderr__ = text(2, "wb", line=True, errors="backslashreplace")


def _python_path(value: str, cwd: str | None = None) -> list[str]:
    where = cwd or os.getcwd()
    return [os.path.normpath(os.path.join(where, e)) for e in value.split(os.pathsep) if e]


def child_sys_path(cwd: str, env: dict[str, str], base: list[str]) -> list[str]:
    """A fresh ``python -m`` run in ``cwd`` with ``env``: cwd, PYTHONPATH, then the rest."""
    entries = [cwd, *_python_path(env.get("PYTHONPATH", ""), cwd), *base]
    return list(dict.fromkeys(entries))


def run_child(job: Job, sys_path: list[str]) -> None:
    """Become ``python -m job.module job.args`` (never returns: the module's exit ends it)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for target, fd in enumerate(job.fds):
        os.dup2(fd, target)
    for fd in job.fds:
        if fd > 2:
            os.close(fd)
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    _streams(unbuffered=bool(job.env.get("PYTHONUNBUFFERED")))
    sys.path[:] = child_sys_path(job.cwd, job.env, sys_path)
    if "numpy" in sys.modules:  # a fresh interpreter seeds numpy's global generator anew
        sys.modules["numpy"].random.seed()
    sys.argv = ["-m", *job.args]
    # A fresh interpreter runs the module's code as __main__ before anything imported it.
    sys.modules.pop(job.module, None)
    runpy.run_module(job.module, run_name="__main__", alter_sys=True)
    sys.exit(0)


def python() -> str:
    """The interpreter a test starts a ``fulmen`` command with: the asker when the server runs."""
    return os.environ.get("FULMEN_PYTHON") or sys.executable


@dataclass
class Launched:
    """A server started for a test session, with the variables that lead fulmen to it set."""

    process: subprocess.Popen[bytes]
    folder: Path
    saved: dict[str, str | None]
    log_copy: str | None = None

    @classmethod
    def start(cls, *, log_copy: str | None = None) -> Launched:
        """Start a server (its imports go on in the background) and point ``$FULMEN_PYTHON`` at it.

        ``$FULMEN_PYTHON`` becomes a small executable that runs this file as an asker.
        ``log_copy``: a file the server's log (each request: forked, or why not) is appended to
        when it stops.
        """
        folder = Path(tempfile.mkdtemp(prefix="fulmen-prefork-"))
        socket_path = folder / "server.sock"
        wrapper = folder / "python"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{__file__}" "$@"\n')
        wrapper.chmod(0o755)
        with open(folder / "server.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, __file__, "serve", str(socket_path), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # It binds before it imports: askers then wait in its backlog, not for a file.
        deadline = time.monotonic() + 30
        while not socket_path.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        saved = {name: os.environ.get(name) for name in ("FULMEN_PYTHON", SOCKET_VARIABLE)}
        os.environ["FULMEN_PYTHON"] = str(wrapper)
        os.environ[SOCKET_VARIABLE] = str(socket_path)
        return cls(process, folder, saved, log_copy)

    def stop(self) -> None:
        """Stop the server (and the children it still has); put the variables back."""
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.log_copy:
            with open(self.log_copy, "ab") as kept:
                kept.write((self.folder / "server.log").read_bytes())
        shutil.rmtree(self.folder, ignore_errors=True)


def environment() -> dict[str, str]:
    """The variables that lead to the server, for a child given a cleaned environment."""
    return {
        name: os.environ[name] for name in ("FULMEN_PYTHON", SOCKET_VARIABLE) if name in os.environ
    }


def ask(args: list[str]) -> NoReturn:
    """Be ``python ARGS`` for the caller: have the server fork it, else run the real interpreter.

    The child gets this process's standard streams, working directory and environment; its
    exit status becomes this process's (a signal that ended it ends this process), signals sent
    here are passed on, and this process's parent ending sends it SIGTERM (what fulmen's engine
    does itself when its launcher dies). Killed (SIGKILL), this process takes the child with it.
    """
    address = os.environ.get(SOCKET_VARIABLE, "")
    parent = os.getppid()  # before anything else: it may end while the server is asked
    pending: list[int] = []
    child: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if child:
            with contextlib.suppress(OSError):
                os.kill(child[0], signum)
        else:
            pending.append(signum)

    for signum in _FORWARDED:  # from the start: a signal before the child exists waits for it
        signal.signal(signum, forward)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        request = {
            "args": args,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "context": process_context(),
        }
        write_message(sock, request, fds=[0, 1, 2])
        reply, _ = read_message(sock)
    except (OSError, EOFError, ValueError):
        reply = {"fallback": "no server"}
    if "pid" not in reply:
        sock.close()
        for signum in _FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        for signum in pending:  # what the real interpreter would have got at its start
            os.kill(os.getpid(), signum)
        os.execv(sys.executable, [sys.executable, *args])
    child.append(int(reply["pid"]))
    for signum in pending:
        forward(signum, None)
    null = os.open(os.devnull, os.O_RDONLY)  # the child alone holds the reading end of stdin
    os.dup2(null, 0)
    os.close(null)
    orphaned = False
    while True:
        ready, _, _ = select.select([sock], [], [], 0.5)
        if ready:
            try:
                status = int(read_message(sock)[0]["status"])
            except (OSError, EOFError, ValueError, KeyError):
                os._exit(1)
            break
        if not orphaned and os.getppid() != parent:
            orphaned = True
            forward(signal.SIGTERM, None)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)


def main() -> None:
    """``prefork.py serve SOCKET PARENT [PRELOAD MODULES]`` serves; ``prefork.py ARGS`` asks.

    PRELOAD and MODULES, comma-separated, replace ``PRELOAD`` and ``MODULES`` (the server's
    own tests use small ones).
    """
    if sys.argv[1:2] != ["serve"]:
        ask(sys.argv[1:])
    path, parent, *lists = sys.argv[2:]
    preload, modules = (
        (PRELOAD, MODULES) if not lists else (lists[0].split(","), lists[1].split(","))
    )
    server = Server(path, int(parent), preload=[m for m in preload if m], modules=modules)
    started = time.monotonic()
    server.preload()
    print(f"prefork: preloaded in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    job = server.serve()
    run_child(job, server.sys_path)


if __name__ == "__main__":
    main()
