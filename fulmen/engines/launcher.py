"""Engine servers as child processes: spawn, wait until healthy, drive over HTTP, stop.

:class:`EngineProcess` runs a server command in its own process group (so stopping it also
stops any workers it forked), polls ``/health`` until it answers, and implements the
:class:`~fulmen.engines.base.Engine` calls over HTTP. :class:`BuiltinLauncher` starts the
built-in server (``python -m fulmen.cli.serve``); :mod:`fulmen.engines.vllm` adds vLLM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

from fulmen.engines.base import INSTANCE_HEADER, Capabilities
from fulmen.errors import EngineError
from fulmen.process_group import stop_process_group
from fulmen.tls import tls_context

__all__ = ["BuiltinLauncher", "EngineProcess", "engine_error_text", "free_port"]

logger = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# How much of the end of a failed start's log is searched for its error.
_LOG_TAIL_BYTES = 64 * 1024
# How a server says its port is taken (uvicorn, vLLM, any Python server: errno 98 on Linux,
# 48 on macOS).
_ADDRESS_IN_USE = re.compile(r"address already in use", re.IGNORECASE)
# How many ports a launcher that picked its own tries before giving up.
_PORT_TRIES = 3
# A traceback's exception line: a dotted class path the message need not repeat.
_QUALIFIED = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*(?:Error|Exception|Exit)\b)")


def engine_error_text(log: str, *, max_lines: int = 5) -> str:
    """Return what an engine that failed to start said last, from its log output.

    A Python traceback gives its exception (the unindented lines after the last ``Traceback``
    header: the class and message, ``fulmen.errors.ConfigError`` shortened to ``ConfigError``),
    with the install line of fulmen's extra for a missing optional package; any other output
    gives its last ``max_lines`` non-blank lines. Lines are joined with `` | ``.
    """
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    headers = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not headers:
        return " | ".join(lines[-max_lines:])
    raised = [
        _QUALIFIED.sub("", line)
        for line in lines[headers[-1] + 1 :]
        if not line.startswith((" ", "\t"))
    ][:max_lines]
    missing = re.match(
        r"ModuleNotFoundError: No module named '([\w.]+)'", raised[0] if raised else ""
    )
    if missing:
        from fulmen.extras import package_of_module

        package = package_of_module(missing.group(1))
        if package is not None:
            raised.append(f"it comes with {package.hint} ({package.needed_for})")
    return " | ".join(raised)


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


class EngineProcess:
    """A server command run as a child process group, with the Engine calls over HTTP.

    Args:
        command: the argv to run.
        host, port: where the server listens.
        env: extra environment variables for the child.
        log_path: file receiving the child's stdout and stderr (default: inherit).
        startup_timeout: seconds to wait for ``/health``.
        token: the engine's admin token (``None``: it asks for none), sent as a bearer token
            with every call this object makes; subclasses hand it to the server through its
            environment, never its command line.
        instance: the id the server echoes in its ``/health`` answer's ``x-fulmen-instance``
            header (``None``: any 200 counts): an answer without it comes from another server
            that holds the port.
        movable_port: the launcher picked ``port`` itself (``free_port``), so a start that
            finds it taken may move to another; the command must pass it as ``--port N``.
    """

    capabilities = Capabilities()

    def __init__(
        self,
        command: list[str],
        *,
        host: str,
        port: int,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 180.0,
        token: str | None = None,
        instance: str | None = None,
        movable_port: bool = False,
    ) -> None:
        self.command = command
        self.token = token
        self.instance = instance
        self._movable_port = movable_port and "--port" in command
        self.host, self.port = host, port
        self.env = env or {}
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_offset = 0

    @property
    def root_url(self) -> str:
        """``http://host:port`` without the ``/v1`` suffix."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the server (it leads its own process group); ``None`` when stopped."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL."""
        return f"{self.root_url}/v1"

    def start(self) -> None:
        """Spawn the server and block until it answers ``/health`` 200; raises ``EngineError``.

        The answer counts only if it carries this start's ``instance`` id: a port picked free
        is free only until someone binds it, and another engine that took it would answer
        ``/health`` as well (then refuse this run's token). A port the launcher picked
        (``movable_port``) is replaced by a fresh one and the server started again, up to
        ``_PORT_TRIES`` times, all within ``startup_timeout``.
        """
        if self._proc is not None:
            raise EngineError("engine process already started; create a new launcher")
        deadline = time.monotonic() + self.startup_timeout
        for attempt in range(_PORT_TRIES if self._movable_port else 1):
            if attempt:
                taken = self.port
                self._move_to(free_port(self.host))
                logger.warning(
                    "port %d was taken by another process before the engine bound it; "
                    "starting the engine again on port %d",
                    taken,
                    self.port,
                )
            if self._spawn_until_healthy(deadline, may_move=self._movable_port):
                return
        raise EngineError(
            f"the engine lost its port to another process {_PORT_TRIES} times in a row "
            f"(last: {self.port}); see {self.log_path}"
        )

    def _spawn_until_healthy(self, deadline: float, *, may_move: bool) -> bool:
        """Spawn the command; ``True`` once healthy, ``False`` if the port proved taken."""
        # Where this start's output begins in a log earlier starts appended to.
        self._log_offset = _size(self.log_path)
        self._log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        logger.info("starting engine: %s", " ".join(self.command))
        self._proc = proc = subprocess.Popen(
            self.command,
            env={**os.environ, **self.env},
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                self.stop()
                output = self._start_output()
                if may_move and _ADDRESS_IN_USE.search(output):
                    return False
                said = engine_error_text(output)
                raise EngineError(
                    f"engine exited with code {code} during startup"
                    + (f": {said}" if said else "")
                    + f" (log: {self.log_path})",
                    detail={"command": self.command},
                )
            health: httpx.Response | None = None
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(f"{self.root_url}/health", timeout=2, verify=tls_context())
            if health is not None and health.status_code == 200:
                if self.instance is None or health.headers.get(INSTANCE_HEADER) == self.instance:
                    return True
                self.stop()
                if may_move:
                    return False
                raise EngineError(
                    f"another process already listens on {self.root_url}, so the engine cannot "
                    "serve there: choose another port (or leave it unset for a free one)",
                    detail={"command": self.command},
                )
            time.sleep(0.5)
        self.stop()
        raise EngineError(
            f"engine not healthy after {self.startup_timeout:.0f}s (log: {self.log_path})"
        )

    def _move_to(self, port: int) -> None:
        """Serve on ``port`` from the next start (the command passes it as ``--port N``)."""
        self.command[self.command.index("--port") + 1] = str(port)
        self.port = port

    def _start_output(self) -> str:
        """Return the end of what this start of the engine wrote to its log (``""``: none)."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return log.read()[-_LOG_TAIL_BYTES:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL it if still alive after ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process_group(proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def run_forever(self) -> int:
        """Start, then wait until the child exits or the user interrupts; returns its exit code."""

        def interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt  # unwinds into the finally below, which stops the child

        # SIGTERM too: a supervisor stopping `fulmen serve` must not orphan the engine
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, interrupt)
        try:
            self.start()
            proc = self._proc
            print(f"serving on {self.base_url}", file=sys.stderr, flush=True)
            return proc.wait() if proc is not None else 1
        except KeyboardInterrupt:
            return 130
        finally:
            self.stop()

    def __enter__(self) -> EngineProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        async with httpx.AsyncClient(
            timeout=600, headers=self._headers(), verify=tls_context()
        ) as client:
            response = await client.post(f"{self.root_url}{path}", json=body)
        if response.status_code >= 400:
            raise EngineError(
                f"{path} failed with {response.status_code}: {response.text}",
                detail={"status": response.status_code},
            )
        return response

    @staticmethod
    def _version(response: httpx.Response) -> int | None:
        header = response.headers.get("x-fulmen-policy-version")
        return int(header) if header is not None else None

    async def health(self) -> bool:
        """Return True when ``/health`` answers 200."""
        try:
            async with httpx.AsyncClient(timeout=5, verify=tls_context()) as client:
                return (await client.get(f"{self.root_url}/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def load_adapter(self, name: str, path: str) -> int | None:
        """``POST /v1/load_lora_adapter``."""
        return self._version(
            await self._post(
                "/v1/load_lora_adapter",
                {"lora_name": name, "lora_path": path, "load_inplace": True},
            )
        )

    async def unload_adapter(self, name: str) -> int | None:
        """``POST /v1/unload_lora_adapter``."""
        return self._version(await self._post("/v1/unload_lora_adapter", {"lora_name": name}))

    async def reload_weights(self, path: str | None = None) -> int | None:
        """``POST /v1/reload_weights``; ``EngineError`` where the engine lacks it."""
        if not self.capabilities.full_reload:
            raise EngineError("this engine does not support a full weight reload over HTTP")
        return self._version(await self._post("/v1/reload_weights", {"path": path}))

    async def aclose(self) -> None:
        """Stop the server."""
        import asyncio

        await asyncio.to_thread(self.stop)


class BuiltinLauncher(EngineProcess):
    """The built-in server (``python -m fulmen.cli.serve``) as a child process.

    Args:
        model: ``tiny``, ``gemma-3-270m`` or a local model directory.
        port: listening port on 127.0.0.1 (default: a free one).
        max_batch, max_lora_rank, threads: passed to ``fulmen serve``.
        python: interpreter to run (default: this one).
        log_path: where the server's output goes.
        token: the admin token its weight-changing routes require (``$FULMEN_ENGINE_TOKEN``).
        adapter_roots: the only folders it loads adapters and weights from (empty: any).
        startup_timeout: seconds to wait for it to be healthy (``engine.startup_timeout_s``).
    """

    capabilities = Capabilities(full_reload=True, policy_version=True, replace_adapter=True)

    def __init__(
        self,
        model: str,
        *,
        port: int | None = None,
        max_batch: int = 8,
        max_lora_rank: int = 64,
        threads: int = 1,
        python: str | None = None,
        log_path: Path | None = None,
        extra_args: list[str] | None = None,
        token: str | None = None,
        adapter_roots: list[Path] | None = None,
        startup_timeout: float = 600.0,
    ) -> None:
        movable = not port
        port = port or free_port()
        instance = secrets.token_hex(8)
        roots = [arg for root in adapter_roots or () for arg in ("--adapter-root", str(root))]
        command = [
            python or sys.executable,
            "-m",
            "fulmen.cli.serve",
            "--model",
            model,
            "--port",
            str(port),
            "--max-batch",
            str(max_batch),
            "--max-lora-rank",
            str(max_lora_rank),
            "--threads",
            str(threads),
            "--instance",
            instance,
            *roots,
            *(extra_args or []),
        ]
        super().__init__(
            command,
            host="127.0.0.1",
            port=port,
            log_path=log_path,
            startup_timeout=startup_timeout,
            env={"FULMEN_ENGINE_TOKEN": token} if token is not None else None,
            token=token,
            instance=instance,
            movable_port=movable,
        )
        self.model = model

    def start(self) -> None:
        """Check the model name (``ConfigError``, before any process starts), then start."""
        from fulmen.engines.models import check_model

        check_model(self.model)
        super().start()
