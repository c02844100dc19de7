"""The runner: claims rollouts from a store and runs the agent on them, many at a time.

One asyncio loop drives everything: a claim loop keeps up to ``concurrency`` attempts running,
a heartbeat loop tells the store which attempts are alive (and learns which ones the store ended:
those are stopped), and each attempt reports its outcome after its spans are stored.

Stopping an agent: an async agent runs in a thread with its own event loop by default
(``async_isolation="thread"``, see ``fulmen.agent.loop_thread``) and is cancelled there; one that
blocks or ignores the cancellation is abandoned, and the runner goes on serving other rollouts.
A sync agent runs in a worker process by default, whose process group is SIGKILLed
(``sync_isolation="thread"`` cannot kill: the thread is abandoned). Spans an agent emits after
its attempt was stopped (a late reward) are dropped, so they never change the outcome. A
timed-out attempt is not reported by the runner: the store's watchdog marks it ``timeout`` and
retries or fails the rollout per its ``RolloutConfig`` (the runner asks for a watchdog pass at
once). ``stop()`` (SIGTERM) stops claiming, lets running attempts finish for
``shutdown_grace_s``, then stops and *releases* the rest so another runner takes them. Every
store call is retried through network errors and 5xx answers with capped, fully jittered
backoff for ``store_retry_s`` (default: as long as the runner runs); all of them are idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fulmen.agent.api import RolloutResult, RolloutTarget
from fulmen.agent.attempt import RunningAttempt, StopReason, error_text
from fulmen.agent.command.agent import CommandAgent
from fulmen.agent.config import RunnerConfig
from fulmen.agent.context import RolloutContext
from fulmen.agent.execution import run_async, run_sync
from fulmen.agent.kinds import kind_of
from fulmen.agent.loop_thread import LoopThreads
from fulmen.agent.spec import AgentSpec
from fulmen.agent.workers import AgentError, WorkerPool
from fulmen.errors import ConfigError
from fulmen.tracing.agent_header import install_agent_header
from fulmen.tracing.backoff import Backoff, retry_call
from fulmen.tracing.exporter import StoreSpanExporter
from fulmen.tracing.instrumentation import instrument, uninstrument
from fulmen.tracing.provider import create_provider, provider_tracer
from fulmen.tracing.tasks import cancel_and_wait
from fulmen.types import AttemptStatus, Mode
from fulmen.types.attempt_keys import mint_attempt_key

if TYPE_CHECKING:
    import httpx
    from opentelemetry.sdk.trace import TracerProvider

    from fulmen.store.base import Store
    from fulmen.types import Claim, Resources

__all__ = ["Runner", "RunnerStats"]

logger = logging.getLogger(__name__)

_LOG_EVERY_S = 60.0  # while the store is away, one warning a minute per loop
_STUCK_AGENT_S = 30.0  # after a stop, how long to wait for agents that ignore cancellation


@dataclass
class RunnerStats:
    """Counts of what a runner did (``ended_by_store``: cancelled or expired by the store)."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    released: int = 0
    ended_by_store: int = 0


class _FailureLog:
    """Logs failed attempts: each kind of error at once, then at most once a minute.

    A broken agent fails every rollout the same way; one line per attempt would bury the
    rest of the output (training says once per step what failed). A repeat within the
    interval is logged at debug level and counted into the next line of its kind.
    """

    _MAX_KINDS = 256  # error texts kept; more distinct ones start the count afresh

    def __init__(self, interval_s: float = _LOG_EVERY_S) -> None:
        self.interval_s = interval_s
        self._seen: dict[str, tuple[float, int]] = {}  # error -> (last logged, repeats since)

    def log(self, attempt_id: str, exc: BaseException, now: float) -> None:
        """Log that ``attempt_id`` failed with ``exc`` (``now``: a monotonic clock)."""
        text = f"{type(exc).__name__}: {exc}"
        kind = text.splitlines()[0][:300] if text.strip() else text
        last, repeats = self._seen.get(kind, (None, 0))
        if last is not None and now - last < self.interval_s:
            self._seen[kind] = (last, repeats + 1)
            logger.debug("attempt %s failed: %s", attempt_id, text)
            return
        if last is None and len(self._seen) >= self._MAX_KINDS:
            self._seen.clear()
        more = f" ({repeats} more like it since the last such line)" if repeats else ""
        logger.info("attempt %s failed: %s%s", attempt_id, text, more)
        self._seen[kind] = (now, 0)


@dataclass
class _Telemetry:
    exporter: StoreSpanExporter
    provider: TracerProvider
    tracer: Any = field(default=None)


class Runner:
    """Runs an agent on rollouts claimed from ``store``; see the module docstring.

    Args:
        store: any ``Store`` (in-process, SQL, or the HTTP client).
        agent: a ``@rollout`` function, an ``Agent`` (instance or class), a plain callable, or
            ``"module:object"``.
        config: a ``RunnerConfig``; keyword ``options`` override its fields.
    """

    def __init__(
        self, store: Store, agent: Any, config: RunnerConfig | None = None, **options: Any
    ) -> None:
        base = config or RunnerConfig()
        self.config = RunnerConfig.model_validate({**base.model_dump(), **options})
        self.store = store
        if isinstance(agent, AgentSpec):  # an agent given as a mapping (a command, ...)
            agent = kind_of(agent).build(agent)
        unguarded = self.config.gateway_url is not None and self.config.gateway_api_key is None
        if isinstance(agent, CommandAgent) and unguarded:
            logger.warning(
                "command agents run behind a gateway without a token: every rollout may call "
                "as any other and post any rollout's reward; give the gateway and the runners "
                "a token ($FULMEN_GATEWAY_TOKEN, docs/security.md)"
            )
        self.target = RolloutTarget.of(agent)
        self._check_isolation()
        self.stats = RunnerStats()
        self._running: dict[str, RunningAttempt] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._resources: dict[int, Resources] = {}
        self._setup_lock = asyncio.Lock()
        self._is_set_up = False
        self._closing = False
        self._pool: WorkerPool | None = None
        self._loop_threads = LoopThreads()  # async agents' own threads and loops
        self._gateway: httpx.AsyncClient | None = None  # flushes the gateway's call records
        self._telemetry: _Telemetry | None = None
        self._failures = _FailureLog()
        self._backoff = Backoff(
            maximum=self.config.store_retry_max_delay, deadline=self.config.store_retry_s
        )

    @property
    def worker_id(self) -> str:
        """The id the store knows this runner by."""
        return self.config.worker_id

    def _uses_processes(self) -> bool:
        is_sync = any(not self.target.is_async(m) for m in Mode)
        return is_sync and self.config.sync_isolation == "process"

    def _check_isolation(self) -> None:
        if self._uses_processes() and self.target.spec is None:
            raise ConfigError(
                f"agent {self.target.obj!r} is sync and cannot be imported by a worker process; "
                "pass it as 'module:object', define it at module level, or use "
                "sync_isolation='thread' (a thread cannot be killed on timeout)"
            )

    def stop(self) -> None:
        """Stop claiming; running attempts get ``shutdown_grace_s`` to finish, then are released.

        Safe to call from a signal handler on the runner's loop.
        """
        self._stop.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """Call ``stop()`` on SIGTERM and SIGINT (from the running loop)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    # -- the main loop --------------------------------------------------------------------------

    async def run(
        self, *, max_rollouts: int | None = None, until_idle: bool = False
    ) -> RunnerStats:
        """Claim and run rollouts until stopped; return what was done.

        Also ends once ``max_rollouts`` were claimed and finished, or, with ``until_idle``, when
        the queue is empty and nothing runs.
        """
        if self._telemetry is not None:
            raise RuntimeError("a Runner can run only once")
        exporter = StoreSpanExporter(
            self.store,
            batch_size=self.config.span_batch_size,
            interval=self.config.span_interval,
            backoff=self._backoff,
            max_in_memory=self.config.span_buffer_max,
            spill_dir=self.config.spill_dir,
        )
        exporter.start()
        provider = create_provider(
            exporter, resource_attributes={"service.instance.id": self.worker_id}
        )
        self._telemetry = _Telemetry(exporter, provider, provider_tracer(provider))
        install_agent_header()  # calls name their agent without instrumentation
        instrumented = instrument(provider, self.config.frameworks)
        if self.target.spec is not None:
            self._pool = WorkerPool(self.target.spec, frameworks=self.config.frameworks)
        if self.config.gateway_url is None:
            logger.warning("no gateway URL: agents call their LLM directly, calls are not recorded")
        else:
            import httpx

            key = self.config.gateway_api_key
            # No kept-alive connections: a gateway that restarts or shuts down first would leave
            # them dangling, and one flush per finished attempt does not need them.
            self._gateway = httpx.AsyncClient(
                timeout=self.config.report_deadline_s,
                limits=httpx.Limits(max_keepalive_connections=0),
                headers={"Authorization": f"Bearer {key}"} if key else None,
            )
        heartbeats = asyncio.create_task(self._heartbeat_loop(), name="fulmen-heartbeat")
        try:
            if self._pool is not None and self._uses_processes():
                # Start one worker before claiming: an agent that cannot load fails the run
                # now, and the first rollout does not spend its timeout on a process start.
                self._pool.release(await self._pool.acquire())
            await self._claim_loop(max_rollouts, until_idle)
            await self._drain()
        finally:
            uninstrument(instrumented)
            self._closing = True
            await cancel_and_wait(heartbeats)
            for task in list(self._tasks):  # only left when run() itself was cancelled
                await cancel_and_wait(task)
            if self._pool is not None:
                await self._pool.aclose()
            self._loop_threads.close()
            try:
                await asyncio.wait_for(exporter.aclose(), self.config.report_deadline_s)
            except TimeoutError:
                logger.error("%d spans could not be stored before exit", exporter.pending)
                await exporter.abandon()  # kept in the spill directory for the next runner
            provider.shutdown()
        return self.stats

    async def _claim_loop(self, max_rollouts: int | None, until_idle: bool) -> None:
        while not self._stop.is_set():
            budget = self.config.concurrency - len(self._running)
            if max_rollouts is not None:
                if self.stats.claimed >= max_rollouts:
                    return
                budget = min(budget, max_rollouts - self.stats.claimed)
            if budget > 0:
                claims = await self._claim(budget)
                for claim in claims:
                    self._start_attempt(claim)
                if claims:
                    continue
                if until_idle and not self._running:
                    return
            await self._sleep(self.config.poll_interval)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _claim(self, limit: int) -> list[Claim]:
        claim_id = f"claim-{uuid.uuid4().hex}"  # the same id on every retry: no double claims
        try:
            return await retry_call(
                lambda: self.store.claim(
                    self.worker_id, limit=limit, modes=self.config.modes, claim_id=claim_id
                ),
                backoff=self._backoff,
                what="claim",
                should_stop=self._stop.is_set,
            )
        except Exception:
            if self._stop.is_set():
                return []
            raise

    def _start_attempt(self, claim: Claim) -> None:
        self.stats.claimed += 1
        running = RunningAttempt()
        self._running[claim.attempt.attempt_id] = running
        task = asyncio.create_task(self._attempt(claim, running), name=claim.attempt.attempt_id)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self) -> None:
        if self._stop.is_set() and self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self.config.shutdown_grace_s)
            if pending:
                logger.info("releasing %d unfinished attempts", len(self._running))
            for running in list(self._running.values()):
                running.stop("release")
        while self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=_STUCK_AGENT_S)
            if pending and self._stop.is_set():
                # An async agent that ignores cancellation cannot be stopped from here; the
                # store ends its attempt (timeout or lost) and another runner retries it.
                logger.error("%d agents ignored cancellation; exiting without them", len(pending))
                return

    # -- one attempt ----------------------------------------------------------------------------

    async def _attempt(self, claim: Claim, running: RunningAttempt) -> None:
        attempt_id = claim.attempt.attempt_id
        try:
            task = asyncio.create_task(self._execute(claim))
            running.task = task
            await running.watch(task, claim.rollout.config.timeout_s)
            if running.reason is not None and self._telemetry is not None:
                # The agent was stopped; anything it emits from now on (a late reward from an
                # agent that ignored the stop) must not reach the attempt.
                self._telemetry.exporter.close_attempt(attempt_id)
            await self._flush_spans()
            await self._flush_gateway()
            await self._report(claim, running.reason, task)
        except Exception:
            logger.exception("attempt %s: could not report its outcome", attempt_id)
        finally:
            self._running.pop(attempt_id, None)
            self._wake.set()

    def _attempt_key(self, claim: Claim) -> str | None:
        """Return the key the attempt's agent gets: valid for this attempt only.

        The gateway's token stays with the runner (it flushes the gateway with it); the agent
        gets a key minted from it that the gateway accepts on this attempt's model paths and
        for its own rewards, while the attempt runs (``fulmen.types.attempt_keys``).
        """
        token = self.config.gateway_api_key
        if token is None:
            return None
        return mint_attempt_key(token, claim.rollout.rollout_id, claim.attempt.attempt_id)

    async def _execute(self, claim: Claim) -> RolloutResult:
        telemetry = self._telemetry
        if telemetry is None:
            raise RuntimeError("the runner is not running")
        context = RolloutContext(
            rollout=claim.rollout,
            attempt=claim.attempt,
            resources=await self._get_resources(claim.rollout.resources_version),
            gateway_url=self.config.gateway_url,
            gateway_api_key=self._attempt_key(claim),
        )
        if self.target.is_async(context.mode):
            await self._ensure_setup()
            if self.config.async_isolation == "loop":
                return await run_async(self.target, context, telemetry.tracer)
            return await self._loop_threads.run(
                lambda: run_async(self.target, context, telemetry.tracer)
            )
        if self.config.sync_isolation == "thread" or self._pool is None:
            await self._ensure_setup()
            return await asyncio.to_thread(run_sync, self.target, context, telemetry.tracer)
        worker = await self._pool.acquire()
        try:
            result = await worker.run(context, lambda span: telemetry.exporter.submit([span]))
        except AgentError:
            self._pool.release(worker)  # the agent raised; the process is fine
            raise
        except BaseException:
            self._pool.discard(worker)
            raise
        self._pool.release(worker)
        return result

    async def _ensure_setup(self) -> None:
        async with self._setup_lock:
            if self._is_set_up:
                return
            result = await asyncio.to_thread(self.target.setup)
            if asyncio.iscoroutine(result):
                await result
            self._is_set_up = True

    async def _get_resources(self, version: int | None) -> Resources | None:
        if version is None:
            return None
        if version not in self._resources:
            self._resources[version] = await retry_call(
                lambda: self.store.get_resources(version),
                backoff=self._backoff,
                what="get_resources",
            )
        return self._resources[version]

    async def _flush_spans(self) -> None:
        if self._telemetry is not None:
            try:
                await asyncio.wait_for(
                    self._telemetry.exporter.flush(), self.config.report_deadline_s
                )
            except TimeoutError:
                logger.error("spans could not be stored within %s s", self.config.report_deadline_s)

    async def _flush_gateway(self) -> None:
        """Have the gateway store its pending LLM call records before the attempt is reported.

        The gateway writes records in batches off the request path; flushing first means that
        whoever sees the attempt final (the trainer's adapter) also sees all of its calls.
        """
        if self._gateway is None or self.config.gateway_url is None:
            return
        import httpx

        url = f"{self.config.gateway_url.rstrip('/')}/gateway/flush"
        try:
            response = await self._gateway.post(url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            logger.warning("gateway flush failed (%s); calls may be stored after the attempt", exc)

    async def _report(
        self, claim: Claim, reason: StopReason | None, task: asyncio.Task[RolloutResult]
    ) -> None:
        attempt_id = claim.attempt.attempt_id
        if reason == "ended":
            self.stats.ended_by_store += 1
            logger.info("attempt %s was ended by the store; agent stopped", attempt_id)
            return
        if reason == "timeout":
            self.stats.timed_out += 1
            logger.warning("attempt %s timed out; agent stopped", attempt_id)
            with contextlib.suppress(Exception):  # the watchdog will do it anyway
                await asyncio.wait_for(self.store.reconcile(), 10.0)
            return
        if reason == "release":
            self.stats.released += 1
            await self._update(attempt_id, AttemptStatus.RELEASED, None)
            return
        exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if exc is None:
            self.stats.succeeded += 1
            await self._update(attempt_id, AttemptStatus.SUCCEEDED, None)
            return
        self.stats.failed += 1
        self._failures.log(attempt_id, exc, asyncio.get_running_loop().time())
        await self._update(attempt_id, AttemptStatus.FAILED, error_text(exc))

    async def _update(self, attempt_id: str, status: AttemptStatus, error: str | None) -> None:
        await retry_call(
            lambda: self.store.update_attempt(attempt_id, status=status, error=error),
            backoff=Backoff(
                maximum=self.config.store_retry_max_delay,
                deadline=self.config.report_deadline_s,
            ),
            what=f"update_attempt({attempt_id}, {status.value})",
        )

    # -- heartbeats -----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        metadata: dict[str, Any] = {
            "pid": os.getpid(),
            "concurrency": self.config.concurrency,
            "agent": self.target.spec,
        }
        loop = asyncio.get_running_loop()
        failing_since: float | None = None  # while beats fail, one warning a minute
        logged_at = 0.0
        while not self._closing:
            await asyncio.sleep(self.config.heartbeat_interval)
            ids = list(self._running)
            try:
                worker = await asyncio.wait_for(
                    self.store.heartbeat(self.worker_id, attempt_ids=ids, metadata=metadata),
                    max(self.config.heartbeat_interval, 5.0),
                )
            except Exception as exc:  # the next beat retries; the store may be restarting
                now = loop.time()
                if failing_since is None or now - logged_at >= _LOG_EVERY_S:
                    failing_since = now if failing_since is None else failing_since
                    logged_at = now
                    logger.warning(
                        "heartbeats failing for %.0f s: %s: %s",
                        now - failing_since,
                        type(exc).__name__,
                        exc,
                    )
                continue
            if failing_since is not None:
                logger.warning("heartbeats back after %.0f s", loop.time() - failing_since)
                failing_since = None
            alive = set(worker.running_attempt_ids)
            for attempt_id in ids:
                running = self._running.get(attempt_id)
                if attempt_id not in alive and running is not None and running.reason is None:
                    running.stop("ended")
