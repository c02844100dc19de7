"""The running services of one training or dev run, started and stopped as one async context.

``TrainingStack`` owns: the store (SQLite in the run directory, or in memory for ``dev``), the
inference engine (a child process, or an endpoint that is already running), the gateway (served
by uvicorn on 127.0.0.1 inside this event loop) and a runner executing the agent. Stopping is
in reverse order, and every part is stopped even when another fails to stop. With a ``cluster``
the store service, engine replicas and runners are Ray actors instead
(``fulmen.cluster.services``) and the gateway spreads rollouts over the replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.agent.rollouts import RolloutSettings
from fulmen.asgi_task import AppTask, loopback_socket
from fulmen.engines.config import EngineConfig
from fulmen.errors import EngineError
from fulmen.store import Store, open_store
from fulmen.store.urls import is_service_url

if TYPE_CHECKING:
    from fulmen.cluster.config import ClusterConfig
    from fulmen.cluster.services import RayServices

__all__ = ["TrainingStack"]

logger = logging.getLogger(__name__)


class TrainingStack:
    """Store, engine, gateway and runner for one run.

    Args:
        store_url: the store to open (``sqlite:///run/store.db``, ``memory://``, or an
            external ``http://`` / ``postgresql://`` store).
        store_token: bearer token for an ``http(s)://`` store that requires one.
        agent: what the runner runs (``"module:object"``, a ``@rollout`` function, an Agent);
            ``None`` starts no runner (offline training: nothing is rolled out).
        model: the model name or directory the engine serves.
        engine: which engine and how to start it.
        rollouts: runner concurrency and isolation.
        log_dir: where the engine's log file goes.
        cluster: run the store service, engine replicas and runners on Ray (``None``: all
            here, as child processes and tasks of this loop).
        python_path: directories runner actors put on ``sys.path`` (the agent's code).
        weights_roots: the only folders the engine may load adapters and weights from (the
            run folder); ``None``: anywhere.
        python: the interpreter the built-in engine runs on (``$FULMEN_PYTHON``; ``None``: this
            one).

    The gateway and the engine get tokens of their own, made for this stack
    (``gateway_token``, ``engine_token``): the runner mints each attempt's key from the first
    (``fulmen.types.attempt_keys``), and the second guards the engine's routes that change the
    served weights (``docs/security.md``).
    """

    def __init__(
        self,
        *,
        store_url: str,
        store_token: str | None = None,
        agent: Any,
        model: str,
        engine: EngineConfig,
        rollouts: RolloutSettings,
        log_dir: Path,
        cluster: ClusterConfig | None = None,
        python_path: Sequence[Path] = (),
        weights_roots: Sequence[Path] | None = None,
        python: str | None = None,
    ) -> None:
        self._store_url = store_url
        self._python = python
        self.gateway_token = secrets.token_urlsafe(32)
        self.engine_token = secrets.token_urlsafe(32)
        self._weights_roots = list(weights_roots) if weights_roots is not None else None
        self._store_token = store_token
        self._agent = agent
        self._model = model
        self._engine_config = engine
        self._rollouts = rollouts
        self._log_dir = log_dir
        self._store: Store | None = None
        self.engine: Any = None
        self.gateway_url = ""
        self._gateway: AppTask | None = None
        self._runner: Any = None
        self._runner_task: asyncio.Task[Any] | None = None
        self._cluster = cluster
        self._python_path = python_path
        self._ray: RayServices | None = None

    @property
    def store_url(self) -> str:
        """The store this run opened, as configured (what ``fulmen rollouts --store`` takes)."""
        return self._store_url

    @property
    def store(self) -> Store:
        """The run's store (available inside the context)."""
        if self._store is None:
            raise RuntimeError("the TrainingStack is not started")
        return self._store

    @property
    def engine_url(self) -> str:
        """The engine's OpenAI base URL (``.../v1``)."""
        if self.engine is not None:
            return str(self.engine.base_url)
        return str(self._engine_config.url)

    async def __aenter__(self) -> TrainingStack:
        try:
            if self._cluster is not None:
                await self._start_on_ray(self._cluster)
                return self
            self._store = await open_store(self._store_url, **self._store_options())
            await self._start_engine()
            await self._start_gateway()
            if self._agent is not None:
                self._start_runner()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _store_options(self) -> dict[str, Any]:
        is_http = is_service_url(self._store_url)
        return {"token": self._store_token} if is_http and self._store_token else {}

    async def _start_engine(self) -> None:
        config = self._engine_config
        if config.kind == "endpoint":
            return
        self._log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self._log_dir / "engine.log"
        if config.kind == "builtin":
            from fulmen.engines.launcher import BuiltinLauncher

            self.engine = BuiltinLauncher(
                self._model,
                max_batch=config.max_batch,
                max_lora_rank=config.max_lora_rank,
                threads=config.threads,
                python=self._python,
                log_path=log_path,
                extra_args=config.builtin_serve_flags(),
                token=self.engine_token,
                adapter_roots=self._weights_roots,
                startup_timeout=config.startup_timeout_s,
            )
        else:
            from fulmen.engines.vllm import VLLMLauncher

            self.engine = VLLMLauncher(
                self._model,
                max_lora_rank=config.max_lora_rank,
                dtype=config.dtype,
                log_path=log_path,
                token=self.engine_token,
                startup_timeout=config.startup_timeout_s,
            )
        logger.info("starting the %s engine for %s (log: %s)", config.kind, self._model, log_path)
        try:
            await asyncio.to_thread(self.engine.start)
        except EngineError as exc:
            raise EngineError(f"{exc.message}; see {log_path}") from exc

    async def _start_on_ray(self, cluster: ClusterConfig) -> None:
        """Store service, engine replicas and runners as Ray actors; the gateway here."""
        from fulmen.cluster.services import RayServices

        self._ray = RayServices(cluster, log_dir=self._log_dir, python_path=self._python_path)
        url, token = await self._ray.start_store(self._store_url, self._store_token)
        self._store = await open_store(url, **({"token": token} if token else {}))
        upstreams = [self.engine_url]
        if self._engine_config.kind != "endpoint":
            self.engine = await self._ray.start_engines(self._model, self._engine_config)
            upstreams = list(self.engine.urls)
        # Runners on other nodes call the gateway: it listens on this node's address, with a
        # token (a non-loopback listener is never open).
        self.gateway_token = self._ray.gateway_token
        self.engine_token = self._ray.engine_token
        await self._start_gateway(upstreams, host=self._ray.node_ip)
        if self._agent is not None:
            await self._ray.start_runners(self._agent, self.gateway_url, self._rollouts)

    async def _start_gateway(
        self,
        upstreams: list[str] | None = None,
        *,
        host: str = "127.0.0.1",
    ) -> None:
        import socket

        from fulmen.gateway.app import create_app
        from fulmen.gateway.upstreams import Upstream

        # The engines this stack started take its engine token (vLLM asks it on every call);
        # an ``endpoint`` engine is the user's, with a key of its own.
        key = self.engine_token if self._engine_config.kind != "endpoint" else None
        engines = [Upstream(base_url=url, api_key=key) for url in upstreams or [self.engine_url]]
        app = create_app(self.store, engines, token=self.gateway_token)
        self._gateway = AppTask(app, name="fulmen-gateway", lifespan="on")
        if host == "127.0.0.1":
            sock = loopback_socket()
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, 0))
        port = await self._gateway.start(sock)
        self.gateway_url = f"http://{host}:{port}"
        logger.info(
            "gateway on %s -> %s", self.gateway_url, ", ".join(upstreams or [self.engine_url])
        )

    def _start_runner(self) -> None:
        from fulmen.agent.config import RunnerConfig
        from fulmen.agent.runner import Runner

        config = RunnerConfig(
            gateway_url=self.gateway_url,
            gateway_api_key=self.gateway_token,
            **self._rollouts.runner_options(),
        )
        self._runner = Runner(self.store, self._agent, config)
        self._runner_task = asyncio.create_task(self._runner.run(), name="fulmen-runner")

    def check_runner(self) -> None:
        """Raise the runner's error if it stopped on its own (or a Ray service failed)."""
        if self._ray is not None:
            self._ray.check()
        if self._runner_task is not None and self._runner_task.done():
            self._runner_task.result()
            raise RuntimeError("the runner stopped unexpectedly")

    async def aclose(self) -> None:
        """Stop the runner, gateway, engine and store, in that order."""
        if self._ray is not None:
            with contextlib.suppress(Exception):
                await self._ray.stop_runners()
        if self._runner is not None and self._runner_task is not None:
            self._runner.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner_task, 30)
        if self._gateway is not None:
            await self._gateway.stop(30)
            self._gateway = None
        if self.engine is not None and self._ray is None:  # Ray's replicas end with the fleet
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.engine.stop)
        if self._store is not None:
            await self._store.aclose()
            self._store = None
        if self._ray is not None:
            ray, self._ray, self.engine = self._ray, None, None
            await ray.aclose()
