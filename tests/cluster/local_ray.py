"""A throwaway multi-node Ray cluster on this machine: a head and worker nodes, each its own
``ray start --block`` with its own temporary directory and ports.

Each node runs in its own session, and stopping kills every process of those sessions (never
``ray stop``, which would stop any other Ray on the machine too).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
#: Small object stores: the fleet ships only adapters through them.
OBJECT_STORE_BYTES = 200 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_block(avoid: set[int], size: int = 40) -> int:
    """A start port of ``size`` consecutive ports that were free a moment ago, none in ``avoid``
    (ports handed out already but perhaps not bound yet: Ray refuses a node whose ports clash)."""
    for _ in range(50):
        start = free_port()
        if start + size >= 65535 or avoid & set(range(start, start + size)):
            continue
        taken = False
        for port in range(start, start + size):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    taken = True
                    break
        if not taken:
            return start
    raise RuntimeError("no block of free ports")


class LocalRayCluster:
    """``ray start`` a head and ``workers`` worker nodes with ``cpus`` CPUs each."""

    def __init__(self, *, workers: int = 2, cpus: int = 2) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))  # short: unix sockets
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._nodes: list[subprocess.Popen[bytes]] = []
        self._ports = {self.port}  # handed out to nodes so far
        self._workers, self._cpus = workers, cpus

    def start(self, timeout: float = 120.0) -> None:
        # Every node, the head too, is started again when it gives up: on a loaded machine a
        # raylet can miss Ray's fixed 30 s to register with the GCS ("The current node timed
        # out during startup", seen in CI with both lanes busy, for a worker and for the head).
        for attempt in range(3):
            if attempt:  # a fresh GCS port: the dead head's may not be free yet
                self.port = _port_block(self._ports, size=1)
                self._ports.add(self.port)
                self.address = f"127.0.0.1:{self.port}"
            self._head = self._start_node(
                "head" + (f"-again{attempt}" if attempt else ""),
                ["--head", "--port", str(self.port)],
            )
            if self._wait_port(self.port, timeout) and self._wait_nodes(1, timeout, self._head):
                break
            _kill_sessions({self._head.pid})
        else:
            raise RuntimeError(f"the ray head gave up starting 3 times: {self.logs()}")
        # Worker nodes join one at a time.
        for i in range(self._workers):
            for attempt in range(3):
                joining = self._start_node(f"w{i}" + (f"-again{attempt}" if attempt else ""))
                if self._wait_nodes(2 + i, timeout, joining):
                    break
                _kill_sessions({joining.pid})  # what it left behind must not join later
            else:
                raise RuntimeError(f"ray worker node w{i} gave up joining 3 times: {self.logs()}")

    def _start_node(self, name: str, role: list[str] | None = None) -> subprocess.Popen[bytes]:
        """Start a node; ``role`` defaults to a worker joining the head."""
        role = role or ["--address", self.address]
        base = _port_block(self._ports)
        self._ports.update(range(base, base + 40))
        command = [
            RAY, "start", "--block", *role,
            "--num-cpus", str(self._cpus),
            "--object-store-memory", str(OBJECT_STORE_BYTES),
            "--temp-dir", str(self.root / name),
            "--node-ip-address", "127.0.0.1",
            "--disable-usage-stats",
            "--node-manager-port", str(base),
            "--object-manager-port", str(base + 1),
            "--min-worker-port", str(base + 10),
            "--max-worker-port", str(base + 39),
        ]  # fmt: skip
        if "--head" in role:
            command += ["--include-dashboard=false", "--ray-client-server-port", str(base + 2)]
        with open(self.root / f"{name}.log", "wb") as log:  # the child keeps its own copy
            node = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._nodes.append(node)
        return node

    def _wait_port(self, port: int, timeout: float) -> bool:
        """Wait until the head's GCS listens on ``port`` (True), or the head exited (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return True
            if self._head.poll() is not None:
                return False
            time.sleep(0.2)
        raise RuntimeError(f"the ray head did not listen in {timeout} s: {self.logs()}")

    def _wait_nodes(self, count: int, timeout: float, joining: subprocess.Popen[bytes]) -> bool:
        """Wait until ``count`` nodes are alive (True), or ``joining`` exited (False)."""
        probe = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', "
            "log_to_driver=False); print('alive-nodes', sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if joining.poll() is not None:
                return False
            if self._head.poll() is not None:
                raise RuntimeError(f"the ray head exited: {self.logs()}")
            try:
                result = subprocess.run(
                    [sys.executable, "-c", probe, self.address],
                    capture_output=True,
                    text=True,
                    timeout=max(5.0, min(60.0, deadline - time.monotonic())),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                # The probe's driver can hang on a raylet of this address that has not yet
                # registered (every node here is 127.0.0.1; seen in CI under load): ask again.
                continue
            # The probe's driver can also print a dying raylet's stack trace (a joining node
            # that missed its start-up deadline, seen in CI), so read only the tagged line.
            alive = [
                int(line.split()[1])
                for line in result.stdout.splitlines()
                if line.startswith("alive-nodes ")
            ]
            if result.returncode == 0 and alive and alive[-1] >= count:
                return True
            time.sleep(1.0)
        raise RuntimeError(f"{count} ray nodes not up in {timeout} s: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        """SIGTERM each node's session, then SIGKILL what is left of it."""
        _kill_sessions({node.pid for node in self._nodes})
        for node in self._nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)


def _kill_sessions(sessions: set[int]) -> None:
    """SIGTERM every process of ``sessions``, then SIGKILL what is left after 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _session_members(sessions):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while _session_members(sessions) and time.monotonic() < deadline:
            time.sleep(0.2)


def _session_members(sessions: set[int]) -> list[int]:
    """Live processes whose session id is one of ``sessions``."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) in sessions:  # state, ppid, pgrp, session
            members.append(int(entry.name))
    return members
