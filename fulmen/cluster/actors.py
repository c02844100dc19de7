"""The bodies of the fleet's Ray actors: one service process each, plus the served policy.

``ServiceActor`` runs one fulmen command as a child process (``fulmen store serve``, the
engine server, ``fulmen runner``) on its node's address and answers the fleet's questions about
it; an engine replica also takes new adapters and weights. ``PolicyBoard`` remembers what the
replicas must serve, so a replica that Ray restarts loads it before it is used again. The
classes are plain: ``fulmen.cluster.ray_fleet`` turns them into actors with ``ray.remote`` and
resource requests, so importing this module never imports Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from fulmen.cluster.child import ChildProcess
from fulmen.errors import EngineError

__all__ = ["PolicyBoard", "ServedPolicy", "ServiceActor", "ServiceSpec"]

logger = logging.getLogger(__name__)

#: A child that exits on its own sooner than this after starting failed to start: its actor
#: reports it instead of being restarted into the same failure over and over.
MIN_UPTIME_S = 15.0


@dataclass(frozen=True)
class ServiceSpec:
    """What one actor runs.

    Attributes:
        kind: ``store``, ``engine`` or ``runner``.
        name: the actor's name (also its log file's).
        module: the Python module run with ``-m`` (``fulmen`` or ``fulmen.cli.serve``).
        args: its arguments; the actor adds ``--host``/``--port`` (services) or
            ``--worker-id`` (runners).
        env: variables added to the node's environment for the child.
        cwd: the child's working directory (``None``: the actor's).
        log_dir: where the child's stderr/stdout files go on the node (created if missing).
        port: the listening port of a service; ``None`` for a runner.
        health_path: the path answering 200 once a service is ready.
        worker_id: a runner's worker id; each incarnation appends its process id.
        exits_when_done: a runner that exits with code 0 has finished (``--until-idle``)
            rather than died.
        allow_remote_flag: pass ``--allow-remote`` when binding a non-loopback address (the
            engine server refuses such a bind without it).
        ready_timeout_s: how long a service may take to answer its health check.
        death_signal: what the child gets when the actor's process dies (SIGKILL; SIGTERM
            for an engine server, so it stops a vLLM server it started).
        board: the name of the ``PolicyBoard`` actor an engine replica loads its policy from
            when it (re)starts (a name, not a handle: Ray keeps restart arguments only while
            they are in scope).
    """

    kind: Literal["store", "engine", "runner"]
    name: str
    module: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=lambda: {})
    cwd: str | None = None
    log_dir: str = ""
    port: int | None = None
    health_path: str = "/health"
    worker_id: str | None = None
    exits_when_done: bool = False
    allow_remote_flag: bool = False
    ready_timeout_s: float = 600.0
    death_signal: int = signal.SIGKILL
    board: str | None = None


@dataclass(frozen=True)
class ServedPolicy:
    """What every engine replica serves on top of the base model.

    Attributes:
        weights: a full-weight model directory the replicas reload as their base (a path
            every node can read); ``None``: the original weights.
        adapters: the LoRA adapters loaded, oldest first, as ``(name, files)`` with the files
            as bytes by relative path (shipped through Ray, so nodes need no shared disk).
    """

    weights: str | None = None
    adapters: tuple[tuple[str, dict[str, bytes]], ...] = ()


class PolicyBoard:
    """The policy the replicas must serve; read by a replica when Ray (re)starts it."""

    def __init__(self) -> None:
        self._policy = ServedPolicy()

    def set(self, policy: ServedPolicy) -> None:
        """Record the policy the replicas serve from now on."""
        self._policy = policy

    def get(self) -> ServedPolicy:
        """Return the policy the replicas serve."""
        return self._policy


class ServiceActor:
    """Runs one service's process on this node and reports on it (see the module docstring).

    Args:
        spec: what to run.
    """

    def __init__(self, spec: ServiceSpec) -> None:
        import ray

        self._spec = spec
        self._node_ip = str(ray.util.get_node_ip_address())
        self._node_id = str(ray.get_runtime_context().get_node_id())
        self._restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self._state: Literal["running", "finished", "failed"] = "running"
        self._exit_code: int | None = None
        self._started = time.monotonic()
        self.worker_id = f"{spec.worker_id}-{os.getpid()}" if spec.worker_id else None
        log_dir = Path(spec.log_dir or Path(tempfile.gettempdir()) / "fulmen-ray")
        self._child = ChildProcess(
            self._command(),
            env={**os.environ, **spec.env},
            # The driver's directory may not exist on this node: then the actor's own.
            cwd=spec.cwd if spec.cwd and os.path.isdir(spec.cwd) else None,
            log_path=log_dir / f"{spec.name}.log",
            out_path=log_dir / f"{spec.name}.out",
            on_exit=self._child_exited,
            death_signal=spec.death_signal,
        )
        if spec.port is not None:
            self._wait_port_free()  # a previous incarnation's server may still be stopping
        self._child.start()
        if spec.port is not None:
            self._wait_ready()
        if spec.board is not None:
            board = ray.get_actor(spec.board)
            self.apply(cast("ServedPolicy", ray.get(board.get.remote())))

    # -- what the fleet asks --------------------------------------------------------------

    @property
    def url(self) -> str | None:
        """``http://NODE_IP:PORT`` of a service; ``None`` for a runner."""
        if self._spec.port is None:
            return None
        return f"http://{self._node_ip}:{self._spec.port}"

    def info(self) -> dict[str, Any]:
        """Where this actor runs and how its child is doing."""
        return {
            "name": self._spec.name,
            "node_ip": self._node_ip,
            "node_id": self._node_id,
            "pid": os.getpid(),
            "child_pid": self._child.pid,
            "url": self.url,
            "worker_id": self.worker_id,
            "restarted": self._restarted,
            "state": self._state,
            "exit_code": self._exit_code,
            "log_tail": self._child.log_tail() if self._state == "failed" else None,
        }

    def stop(self, grace_s: float = 10.0) -> dict[str, Any]:
        """Stop the child (SIGTERM, then SIGKILL after ``grace_s``); return its exit and output.

        ``last_line`` is the child's last stdout line (``fulmen runner`` prints its counts).
        """
        code = self._child.stop(grace_s)
        return {"name": self._spec.name, "exit_code": code, "last_line": self._child.last_line()}

    # -- engine replicas ------------------------------------------------------------------

    def apply(self, policy: ServedPolicy) -> int | None:
        """Serve ``policy``: reload its weights (if any), then load its adapters, oldest first."""
        version = None
        if policy.weights is not None:
            version = self.reload_weights(policy.weights)
        for name, files in policy.adapters:
            version = self.load_adapter(name, files)
        return version

    def load_adapter(self, name: str, files: dict[str, bytes]) -> int | None:
        """Write the adapter's files on this node and hot-load them as model ``name``."""
        directory = Path(tempfile.gettempdir()) / "fulmen-ray" / self._spec.name / name
        for relative, data in files.items():
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        body = {"lora_name": name, "lora_path": str(directory), "load_inplace": True}
        return self._post("/v1/load_lora_adapter", body)

    def unload_adapter(self, name: str) -> int | None:
        """Stop serving adapter ``name`` and delete its files on this node.

        An adapter this replica does not have is not an error: a replica that Ray restarted
        loaded only the adapters served when it came back.
        """
        try:
            version = self._post("/v1/unload_lora_adapter", {"lora_name": name})
        except EngineError as exc:
            if not (isinstance(exc.detail, dict) and exc.detail.get("status") == 404):
                raise
            version = None
        directory = Path(tempfile.gettempdir()) / "fulmen-ray" / self._spec.name / name
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
        return version

    def reload_weights(self, path: str | None) -> int | None:
        """Replace the base weights from ``path`` (``None``: the original weights)."""
        return self._post("/v1/reload_weights", {"path": path})

    # -- plumbing -------------------------------------------------------------------------

    def _command(self) -> list[str]:
        spec = self._spec
        command = [sys.executable, "-m", spec.module, *spec.args]
        if spec.port is not None:
            command += ["--host", self._node_ip, "--port", str(spec.port)]
            if spec.allow_remote_flag and not _is_loopback(self._node_ip):
                command.append("--allow-remote")
        if self.worker_id is not None:
            command += ["--worker-id", self.worker_id]
        return command

    def _child_exited(self, code: int) -> None:
        """Handle a child that exited unasked: it finished, failed to start, or died."""
        self._exit_code = code
        if code == 0 and self._spec.exits_when_done:
            self._state = "finished"
            return
        if time.monotonic() - self._started < MIN_UPTIME_S:
            self._state = "failed"
            logger.error("%s exited with %s while starting", self._spec.name, code)
            return
        logger.error("%s exited with %s; ending this actor so Ray restarts it", self._spec, code)
        os._exit(1)  # the actor's process dies with its child: Ray starts a new one

    def _wait_port_free(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((self._node_ip, self._spec.port or 0))
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        return  # the child reports the bind error itself
            time.sleep(0.2)

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self._spec.ready_timeout_s
        url = f"{self.url}{self._spec.health_path}"
        while time.monotonic() < deadline:
            if self._child.returncode is not None:
                raise EngineError(
                    f"{self._spec.name} exited with {self._child.returncode} while starting: "
                    f"{self._child.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        self._child.stop(5)
        raise EngineError(
            f"{self._spec.name} not ready at {url} after {self._spec.ready_timeout_s}s"
        )

    def _post(self, path: str, body: dict[str, Any]) -> int | None:
        import httpx

        try:
            token = self._spec.env.get("FULMEN_ENGINE_TOKEN")
            headers = {"Authorization": f"Bearer {token}"} if token else None
            response = httpx.post(f"{self.url}{path}", json=body, headers=headers, timeout=600)
        except httpx.HTTPError as exc:
            raise EngineError(f"{self._spec.name}: {path} failed: {exc}") from exc
        if response.status_code >= 400:
            raise EngineError(
                f"{self._spec.name}: {path} failed with {response.status_code}: {response.text}",
                detail={"status": response.status_code},
            )
        header = response.headers.get("x-fulmen-policy-version")
        return int(header) if header is not None else None


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
