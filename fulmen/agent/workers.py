"""Worker processes for sync agents: a sync agent runs where it can be killed.

A Python thread cannot be stopped from outside, so by default the runner runs sync agents in
child processes, each the leader of its own process group: on a timeout or a shutdown the whole
group (the agent and anything it spawned) gets SIGKILL. A child is reused for later rollouts
until it has to be killed.

The parent and a child talk in JSON lines: the child's stdin brings the agent spec and then one
job per rollout; its original stdout carries back spans as they end, then the result or the
traceback. The agent's own prints go to stderr, so they cannot corrupt the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from fulmen.errors import ConfigError
from fulmen.tracing.exporter import span_to_create
from fulmen.types import SpanCreate

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from fulmen.agent.context import RolloutContext

__all__ = ["AgentError", "ProcessWorker", "WorkerDied", "WorkerPool", "main"]

logger = logging.getLogger(__name__)

_LINE_LIMIT = 64 * 1024 * 1024  # one span line may hold long prompts


class AgentError(Exception):
    """The agent raised in a worker process; ``traceback_text`` is the child's traceback."""

    def __init__(self, traceback_text: str) -> None:
        super().__init__(traceback_text.strip().splitlines()[-1] if traceback_text else "")
        self.traceback_text = traceback_text


class WorkerDied(Exception):
    """A worker process exited while running a rollout (killed, crashed, out of memory)."""


class ProcessWorker:
    """One child process that runs sync rollouts of one agent, one at a time."""

    def __init__(
        self,
        spec: str,
        *,
        sys_path: Sequence[str] | None = None,
        frameworks: Sequence[str] | None = None,
    ) -> None:
        self.spec = spec
        self._sys_path = list(sys_path if sys_path is not None else sys.path)
        self._frameworks = list(frameworks) if frameworks is not None else None
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id), once started."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        """Start the child and wait until it has imported and set up the agent."""
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fulmen.agent.workers",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so killpg reaches its children
            limit=_LINE_LIMIT,
        )
        await self._send(
            {"spec": self.spec, "sys_path": self._sys_path, "frameworks": self._frameworks}
        )
        reply = await self._receive()
        if "error" in reply:
            self.kill()
            raise ConfigError(f"worker could not load agent {self.spec!r}:\n{reply['error']}")

    async def run(self, context: RolloutContext, on_span: Callable[[SpanCreate], None]) -> Any:
        """Run one rollout; spans are passed to ``on_span`` as they arrive.

        Returns the checked result, raises ``AgentError`` if the agent raised and
        ``WorkerDied`` if the process ended. Cancelling this call kills the process group.
        """
        job = {
            "rollout": context.rollout.model_dump(mode="json"),
            "attempt": context.attempt.model_dump(mode="json"),
            "resources": (context.resources.model_dump(mode="json") if context.resources else None),
            "gateway_url": context.gateway_url,
            "gateway_api_key": context.gateway_api_key,
        }
        try:
            await self._send(job)
            while True:
                message = await self._receive()
                if "span" in message:
                    on_span(SpanCreate.model_validate(message["span"]))
                elif "error" in message:
                    raise AgentError(str(message["error"]))
                else:
                    return message.get("result")
        except asyncio.CancelledError:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the child's whole process group (no-op if it already exited)."""
        if self._proc is None or self._proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    @property
    def is_alive(self) -> bool:
        """Whether the child is running."""
        return self._proc is not None and self._proc.returncode is None

    async def aclose(self, timeout: float = 5.0) -> None:
        """Ask the child to exit (EOF on stdin); kill it if it does not within ``timeout``."""
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            self.kill()
            await proc.wait()

    async def _send(self, message: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise WorkerDied("worker not started")
        try:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise WorkerDied(f"worker {proc.pid} is gone") from exc

    async def _receive(self) -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.stdout is None:
            raise WorkerDied("worker not started")
        line = await proc.stdout.readline()
        if not line:
            code = await proc.wait()
            raise WorkerDied(f"worker {proc.pid} exited with code {code}")
        return json.loads(line)


class WorkerPool:
    """Idle ``ProcessWorker``s for one agent, started on demand and reused until killed."""

    def __init__(
        self,
        spec: str,
        *,
        sys_path: Sequence[str] | None = None,
        frameworks: Sequence[str] | None = None,
    ) -> None:
        self._spec = spec
        self._sys_path = list(sys_path if sys_path is not None else sys.path)
        self._frameworks = frameworks
        self._idle: list[ProcessWorker] = []
        self._all: set[ProcessWorker] = set()

    async def acquire(self) -> ProcessWorker:
        """Return an idle live worker, or start a new one."""
        while self._idle:
            worker = self._idle.pop()
            if worker.is_alive:
                return worker
            self._all.discard(worker)
        worker = ProcessWorker(self._spec, sys_path=self._sys_path, frameworks=self._frameworks)
        self._all.add(worker)
        try:
            await worker.start()
        except BaseException:
            worker.kill()
            self._all.discard(worker)
            raise
        return worker

    def release(self, worker: ProcessWorker) -> None:
        """Give back a worker after a rollout that ended normally."""
        if worker.is_alive:
            self._idle.append(worker)
        else:
            self._all.discard(worker)

    def discard(self, worker: ProcessWorker) -> None:
        """Kill a worker that must not be reused (timed out, cancelled, broken)."""
        worker.kill()
        self._all.discard(worker)

    async def aclose(self) -> None:
        """Stop every worker."""
        workers, self._all, self._idle = list(self._all), set(), []
        await asyncio.gather(*(w.aclose() for w in workers), return_exceptions=True)


# -- the child side -----------------------------------------------------------------------------


class _PipeExporter(SpanExporter):
    """Writes each ended span of the child as a JSON line to the parent."""

    def __init__(self, write: Callable[[dict[str, Any]], None]) -> None:
        self._write = write

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` to the parent now."""
        for span in spans:
            converted = span_to_create(span)
            if converted is not None:
                self._write({"span": converted.model_dump(mode="json")})
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Lines are written at once."""
        del timeout_millis
        return True


def _writer(stream: IO[bytes]) -> Callable[[dict[str, Any]], None]:
    lock = threading.Lock()  # spans may end in threads the agent started

    def write(message: dict[str, Any]) -> None:
        data = json.dumps(message, default=str).encode() + b"\n"
        with lock:
            try:
                stream.write(data)
                stream.flush()
            except OSError:
                os._exit(1)  # the runner is gone: nobody can use this rollout any more

    return write


def _run_job(job: dict[str, Any], target: Any, tracer: Any) -> Any:
    from fulmen.agent.context import RolloutContext
    from fulmen.agent.execution import run_sync
    from fulmen.types import Attempt, Resources, Rollout

    context = RolloutContext(
        rollout=Rollout.model_validate(job["rollout"]),
        attempt=Attempt.model_validate(job["attempt"]),
        resources=Resources.model_validate(job["resources"]) if job["resources"] else None,
        gateway_url=job["gateway_url"],
        gateway_api_key=job["gateway_api_key"],
    )
    return run_sync(target, context, tracer)


def _die_with_parent() -> None:
    # Linux only: SIGKILL this process when the runner dies, even by SIGKILL, so an orphaned
    # agent never keeps running a rollout the store will give to someone else.
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def main() -> None:
    """Entry point of a worker process (``python -m fulmen.agent.workers``)."""
    _die_with_parent()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the agent's prints go to stderr, not into the protocol
    write = _writer(protocol)
    hello = json.loads(sys.stdin.readline())
    sys.path[:0] = [p for p in hello["sys_path"] if p not in sys.path]
    try:
        from fulmen.agent.api import load_target
        from fulmen.tracing.agent_header import install_agent_header
        from fulmen.tracing.instrumentation import instrument
        from fulmen.tracing.provider import create_provider, provider_tracer

        target = load_target(hello["spec"])
        if asyncio.iscoroutine(setup := target.setup()):
            asyncio.run(setup)
        provider = create_provider(_PipeExporter(write))
        install_agent_header()
        instrument(provider, hello.get("frameworks"))
        tracer = provider_tracer(provider)
    except BaseException:
        write({"error": traceback.format_exc()})
        return
    write({"ready": True})
    for line in sys.stdin:
        try:
            result = _run_job(json.loads(line), target, tracer)
        except BaseException:
            write({"error": traceback.format_exc()})
        else:
            write({"result": result})


if __name__ == "__main__":
    main()
