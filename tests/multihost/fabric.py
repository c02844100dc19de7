"""Hosts made of Linux network namespaces on one bridge, for multi-host tests.

``Fabric`` creates a *switch* namespace holding a bridge and, per host, a namespace joined to
the bridge by a veth pair (``eth0`` inside the host, ``p-NAME`` on the switch). Nothing is
added to the machine's own network namespace, so no address of the machine is touched.
``cut(host)`` takes the host's switch port down: the host's processes keep running, but
every packet to or from it is dropped, as when a machine's network dies. ``close()`` kills
the processes it started and deletes the namespaces, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Fabric", "netns_unavailable_reason", "tail"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def netns_unavailable_reason() -> str | None:
    """Return why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "multi-host tests need root to create network namespaces (ip netns add)"
    probe = f"fm-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"ip netns add is not permitted here: {detail.strip()}"
    with contextlib.suppress(subprocess.CalledProcessError):
        _ip("netns", "del", probe)
    return None


class Fabric:
    """A switch namespace with a bridge, and host namespaces on ``10.77.0.0/24``."""

    def __init__(self) -> None:
        self._tag = uuid.uuid4().hex[:6]
        self.switch = f"fm-{self._tag}-sw"
        self.addresses: dict[str, str] = {}
        self._processes: list[subprocess.Popen[bytes]] = []
        _ip("netns", "add", self.switch)
        try:
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def namespace(self, host: str) -> str:
        """The namespace name of ``host``."""
        return f"fm-{self._tag}-{host}"

    def add_host(self, host: str) -> str:
        """Create ``host`` on the bridge and return its address."""
        ns = self.namespace(host)
        address = f"10.77.0.{len(self.addresses) + 1}"
        _ip("netns", "add", ns)
        self.addresses[host] = address  # from here on, close() deletes it
        _ip("-n", ns, "link", "set", "lo", "up")
        port = f"p-{host}"
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", ns)  # fmt: skip
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        return address

    def start(
        self,
        host: str,
        argv: Sequence[str],
        *,
        log: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host`` (its own process group), output appended to ``log``."""
        with log.open("ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.namespace(host), *argv],
                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self._processes.append(process)
        return process

    def run(
        self, host: str, argv: Sequence[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` to completion and return its result (text)."""
        return subprocess.run(["ip", "netns", "exec", self.namespace(host), *argv],
                              capture_output=True, text=True, **kwargs)  # fmt: skip

    def cut_command(self, host: str) -> list[str]:
        """The command that takes ``host``'s switch port down."""
        return ["ip", "-n", self.switch, "link", "set", f"p-{host}", "down"]

    def stop(self, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
        """SIGTERM ``process``'s group, SIGKILL it if it outlives ``timeout``."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                continue

    def close(self) -> None:
        """Kill every process started here and delete the namespaces (idempotent)."""
        for process in reversed(self._processes):
            if process.poll() is None:
                self.stop(process, timeout=5)
        self._processes.clear()
        for host in list(self.addresses):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", self.namespace(host))
        self.addresses.clear()
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", self.switch)


def tail(log: Path, chars: int = 3000) -> str:
    """The end of a log file, for assertion messages."""
    return log.read_text(errors="replace")[-chars:] if log.exists() else f"({log} missing)"
