"""``RayServices``: what ``TrainingStack`` starts on Ray when the config has a ``cluster:``.

The trainer keeps its own event loop, algorithm and gateway; the services around it become
actors: the store service (for a SQLite store, on the trainer's node, where the file is), the
engine replicas and the runners. The gateway listens on the trainer's node address with a
token, because runners on other nodes call it; the store service gets a token of its own.
Tokens are made per run and handed to the actors in their environment.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.cluster.config import ClusterConfig
from fulmen.cluster.ray_fleet import RayFleet
from fulmen.cluster.replicas import EngineReplicas
from fulmen.cluster.specs import engine_spec, runner_spec, store_spec
from fulmen.engines.base import Capabilities
from fulmen.errors import ConfigError
from fulmen.store.urls import is_in_memory, is_service_url, store_scheme

if TYPE_CHECKING:
    from fulmen.agent.rollouts import RolloutSettings
    from fulmen.engines.config import EngineConfig

__all__ = ["RayServices"]


class RayServices:
    """The store service, engine replicas and runners of one run, as Ray actors.

    Args:
        config: the ``cluster:`` section.
        log_dir: the run directory; actors write their logs to ``LOG_DIR/cluster/`` on their
            node.
        python_path: directories the runners put on ``sys.path`` (the agent's code).
    """

    def __init__(
        self, config: ClusterConfig, *, log_dir: Path, python_path: Sequence[Path] = ()
    ) -> None:
        self.config = config
        self.fleet = RayFleet(config)
        self._log_dir = log_dir / "cluster"
        self._python_path = list(python_path)
        self.gateway_token = secrets.token_urlsafe(24)
        # The engine replicas' admin token: their weight-changing routes require it.
        self.engine_token = secrets.token_urlsafe(24)
        self._store_url = ""
        self._store_token: str | None = None

    @property
    def node_ip(self) -> str:
        """The trainer's node address (where the gateway listens)."""
        return self.fleet.node_ip

    async def start_store(self, store_url: str, token: str | None) -> tuple[str, str | None]:
        """Join the cluster and serve ``store_url`` from an actor; return its URL and token.

        An ``http(s)://`` store is already a service: it is used as it is.
        """
        await asyncio.to_thread(self.fleet.connect)
        if is_service_url(store_url):
            self._store_url, self._store_token = store_url, token
            return store_url, token
        if is_in_memory(store_url):
            raise ConfigError("cluster: an in-memory store cannot be shared with Ray actors")
        from fulmen.engines.launcher import free_port

        self._store_token = secrets.token_urlsafe(24)
        spec = store_spec(
            name=f"{self.fleet.namespace}-store",
            db_url=store_url,
            token=self._store_token,
            port=free_port(self.node_ip),
            log_dir=self._log_dir,
        )
        is_sqlite = store_scheme(store_url) == "sqlite"
        (info,) = await asyncio.to_thread(
            self.fleet.place, [spec], num_cpus=self.config.store_cpus, on_this_node=is_sqlite
        )
        self._store_url = str(info["url"])
        return self._store_url, self._store_token

    async def start_engines(self, model: str, engine: EngineConfig) -> EngineReplicas:
        """Start ``engine_replicas`` replicas of ``engine.kind`` serving ``model``."""
        from fulmen.engines.launcher import BuiltinLauncher, free_port

        if engine.kind == "vllm":
            from fulmen.engines.vllm import VLLMLauncher

            capabilities: Capabilities = VLLMLauncher.capabilities
        else:
            capabilities = BuiltinLauncher.capabilities
        ports: set[int] = set()
        while len(ports) < self.config.engine_replicas:
            ports.add(free_port(self.node_ip))
        specs = [
            engine_spec(
                engine,
                name=f"{self.fleet.namespace}-engine-{i}",
                model=model,
                port=port,
                threads=max(1, int(self.config.engine_cpus)),
                log_dir=self._log_dir,
                board=self.fleet.board_name,
                token=self.engine_token,
            )
            for i, port in enumerate(sorted(ports))
        ]
        board = await asyncio.to_thread(self.fleet.policy_board)
        infos = await asyncio.to_thread(
            self.fleet.place,
            specs,
            num_cpus=self.config.engine_cpus,
            num_gpus=self.config.engine_gpus,
        )
        return EngineReplicas(
            self.fleet.handles("engine"),
            [f"{info['url']}/v1" for info in infos],
            board=board,
            capabilities=capabilities,
        )

    async def start_runners(self, agent: Any, gateway_url: str, rollouts: RolloutSettings) -> None:
        """Start ``runners`` runner actors claiming from the store and calling the gateway."""
        from fulmen.agent.spec import AgentSpec, runner_agent_args

        if not isinstance(agent, str | AgentSpec):
            raise ConfigError(
                "cluster: runners on Ray import the agent by name: give it as 'module:object' "
                f"or as a mapping (a command, config agent), not as an object ({agent!r})"
            )
        args = [
            "--store", self._store_url,
            *runner_agent_args(agent),
            "--gateway", gateway_url,
            *rollouts.runner_flags(),
        ]  # fmt: skip
        specs = [
            runner_spec(
                name=f"{self.fleet.namespace}-runner-{i}",
                args=args,
                store_token=self._store_token,
                gateway_token=self.gateway_token,
                python_path=self._python_path,
                log_dir=self._log_dir,
                worker_id=f"{self.fleet.namespace}-runner-{i}",
            )
            for i in range(self.config.runners)
        ]
        await asyncio.to_thread(self.fleet.place, specs, num_cpus=self.config.runner_cpus)

    def check(self) -> None:
        """Raise when a service failed for good."""
        self.fleet.check()

    async def stop_runners(self) -> None:
        """Stop the runners (first, so no rollout is claimed while the rest stops)."""
        await asyncio.to_thread(self.fleet.stop_runners)

    async def aclose(self) -> None:
        """End every actor and leave the cluster."""
        await asyncio.to_thread(self.fleet.close)
