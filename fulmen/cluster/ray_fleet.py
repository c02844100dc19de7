"""``RayFleet``: the run's store service, engine replicas and runners as actors on a Ray cluster.

The fleet joins the cluster (``ray.init``), places each service as a ``ServiceActor`` with its
resource request, waits until each is ready, watches them from a background thread and tears
them all down on ``close``. Ray restarts an actor whose process died (``max_restarts``); the
watcher logs each restart, and an actor that failed to start, or that Ray gave up on, is
reported by ``check`` so the trainer stops instead of waiting for rollouts nobody runs.

The actors are owned by the process that created them: if it dies, Ray ends them too, and
each service process dies with its actor (``fulmen.cluster.child``), so nothing is left behind.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

from fulmen.cluster.actors import PolicyBoard, ServiceActor, ServiceSpec
from fulmen.cluster.config import ClusterConfig
from fulmen.errors import ConfigError, FulmenError

__all__ = ["ActorRestart", "RayFleet"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorRestart:
    """One restart of an actor that the watcher saw.

    Attributes:
        name: the actor's name.
        seen_at: wall-clock time (``time.time()``) the watcher saw the new incarnation.
        old_worker_id / new_worker_id: a runner's worker ids before and after.
    """

    name: str
    seen_at: float
    old_worker_id: str | None
    new_worker_id: str | None


@dataclass
class _Placed:
    spec: ServiceSpec
    handle: Any
    info: dict[str, Any] = field(default_factory=lambda: {})
    failures: int = 0


#: Consecutive failed looks after which an actor counts as gone (not being restarted).
_GONE_AFTER = 10


class RayFleet:
    """Actors of one run on a Ray cluster (see the module docstring).

    Args:
        config: the ``cluster:`` section (address, resources, restarts, spreading).
        namespace: Ray namespace of the actors (default: ``config.namespace`` or a new
            ``fulmen-<random>``).
        watch_interval_s: seconds between the watcher's looks at the actors.
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        namespace: str | None = None,
        watch_interval_s: float = 1.0,
    ) -> None:
        self.config = config
        self.namespace = namespace or config.namespace or f"fulmen-{secrets.token_hex(4)}"
        self._watch_interval_s = watch_interval_s
        self._placed: dict[str, _Placed] = {}
        self._board: Any = None
        self._owns_ray = False
        self._lock = threading.Lock()
        self._problem: str | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.restarts: list[ActorRestart] = []
        self.node_ip = ""
        self.node_id = ""

    # -- joining and leaving ----------------------------------------------------------------

    def connect(self) -> None:
        """Join the Ray cluster at ``config.address`` (reusing a connection already made)."""
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("cluster.backend 'ray' needs Ray: pip install 'fulmen[ray]'") from exc
        if not ray.is_initialized():
            ray.init(
                address=self.config.address,
                namespace=self.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
            self._owns_ray = True
        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        self.node_ip = str(ray.util.get_node_ip_address())
        logger.info(
            "joined the Ray cluster at %s (namespace %s, this node %s)",
            self.config.address,
            self.namespace,
            self.node_ip,
        )

    def close(self, grace_s: float = 10.0) -> None:
        """Stop every service (runners first), end every actor and leave the cluster."""
        import ray

        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        order = {"runner": 0, "engine": 1, "store": 2}
        for placed in sorted(self._placed.values(), key=lambda p: order[p.spec.kind]):
            self._stop_one(placed, grace_s)
        for placed in self._placed.values():
            ray.kill(placed.handle, no_restart=True)
        if self._board is not None:
            ray.kill(self._board, no_restart=True)
        self._placed.clear()
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False

    def stop_runners(self, grace_s: float = 10.0) -> list[dict[str, Any]]:
        """Stop the runners (their rollouts finish or are released); return what they printed."""
        import ray

        results: list[dict[str, Any]] = []
        for name in [n for n, p in self._placed.items() if p.spec.kind == "runner"]:
            placed = self._placed.pop(name)
            results.append(self._stop_one(placed, grace_s))
            ray.kill(placed.handle, no_restart=True)
        return results

    def _stop_one(self, placed: _Placed, grace_s: float) -> dict[str, Any]:
        import ray

        try:
            return ray.get(placed.handle.stop.remote(grace_s), timeout=grace_s + 30)
        except Exception as exc:  # a dead or restarting actor: killing it is all that is left
            logger.warning("could not stop %s cleanly: %s", placed.spec.name, exc)
            return {"name": placed.spec.name, "exit_code": None, "last_line": None}

    # -- placing ------------------------------------------------------------------------------

    @property
    def board_name(self) -> str:
        """The name of the run's ``PolicyBoard`` actor."""
        return f"{self.namespace}-policy"

    def policy_board(self) -> Any:
        """Return the ``PolicyBoard`` actor replicas read when they (re)start (made once)."""
        import ray

        if self._board is None:
            board_cls: Any = ray.remote(num_cpus=0)(PolicyBoard)
            self._board = board_cls.options(
                name=self.board_name, scheduling_strategy=self._here(soft=True)
            ).remote()
        return self._board

    def place(
        self,
        specs: list[ServiceSpec],
        *,
        num_cpus: float,
        num_gpus: float = 0.0,
        on_this_node: bool = False,
    ) -> list[dict[str, Any]]:
        """Start one actor per spec and wait until all are ready; return their ``info``.

        Args:
            specs: what each actor runs (names must be new).
            num_cpus: each actor's CPU request.
            num_gpus: each actor's GPU request.
            on_this_node: place them on the driver's node (a SQLite store's file is there).
        """
        import ray

        actor_cls: Any = ray.remote(ServiceActor)
        strategy: Any = (
            self._here(soft=False)
            if on_this_node
            else ("SPREAD" if self.config.spread else "DEFAULT")
        )
        started: list[_Placed] = []
        for spec in specs:
            if spec.name in self._placed:
                raise ConfigError(f"an actor named {spec.name!r} is already placed")
            handle = actor_cls.options(
                name=spec.name,
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                max_restarts=self.config.max_restarts,
                # Calls made while Ray restarts an actor wait for the new one, in order (they
                # are idempotent: loading an adapter twice, stopping twice, asking for info).
                max_task_retries=-1 if self.config.max_restarts != 0 else 0,
                max_concurrency=4,  # info() answers while an adapter loads
                scheduling_strategy=strategy,
            ).remote(spec)
            placed = _Placed(spec, handle)
            self._placed[spec.name] = placed
            started.append(placed)
        infos = ray.get(
            [p.handle.info.remote() for p in started], timeout=self.config.start_timeout_s
        )
        for placed, info in zip(started, infos, strict=True):
            placed.info = info
            if info["state"] == "failed":
                raise FulmenError(f"{info['name']} failed to start:\n{info['log_tail']}")
            logger.info(
                "%s ready on node %s at %s%s",
                info["name"],
                info["node_id"][:12],
                info["node_ip"],
                f" ({info['url']})" if info["url"] else "",
            )
        self._start_watcher()
        return infos

    def handles(self, kind: str) -> list[Any]:
        """Return the actor handles of ``kind`` (``store``, ``engine``, ``runner``), in order."""
        return [p.handle for p in self._placed.values() if p.spec.kind == kind]

    def infos(self, kind: str) -> list[dict[str, Any]]:
        """Return the last ``info`` the watcher saw of each actor of ``kind``."""
        with self._lock:
            return [dict(p.info) for p in self._placed.values() if p.spec.kind == kind]

    def _here(self, *, soft: bool) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=self.node_id, soft=soft)

    # -- watching -----------------------------------------------------------------------------

    def check(self) -> None:
        """Raise ``FulmenError`` when an actor failed for good (it will not come back)."""
        if self._problem is not None:
            raise FulmenError(self._problem)

    def finished(self, kind: str) -> bool:
        """Whether every actor of ``kind`` has a child that finished its work (exit code 0)."""
        infos = self.infos(kind)
        return bool(infos) and all(i["state"] == "finished" for i in infos)

    def _start_watcher(self) -> None:
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="fulmen-ray-watch")
            self._watcher.daemon = True
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._watch_interval_s):
            self._watch_once()

    def _watch_once(self) -> None:
        """Ask every actor how it is; note restarts and failures."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        for placed in list(self._placed.values()):
            if self._stop.is_set():
                return
            try:
                info = cast("dict[str, Any]", ray.get(placed.handle.info.remote(), timeout=5))
            except GetTimeoutError:
                continue  # busy or starting again: look next time
            except RayActorError as exc:
                # A call in flight when the process died fails even though Ray restarts the
                # actor; only an actor that stays unreachable is gone for good.
                placed.failures += 1
                if placed.failures >= _GONE_AFTER:
                    self._problem = f"{placed.spec.name} is gone and was not restarted: {exc}"
                continue
            placed.failures = 0
            old = placed.info
            if old and info["pid"] != old.get("pid"):
                restart = ActorRestart(
                    placed.spec.name, time.time(), old.get("worker_id"), info["worker_id"]
                )
                self.restarts.append(restart)
                logger.warning(
                    "%s was restarted on %s (process %s -> %s%s)",
                    placed.spec.name,
                    info["node_ip"],
                    old.get("pid"),
                    info["pid"],
                    f"; worker {restart.old_worker_id} -> {restart.new_worker_id}"
                    if restart.new_worker_id
                    else "",
                )
            if info["state"] == "failed":
                self._problem = f"{placed.spec.name} failed:\n{info['log_tail']}"
            with self._lock:
                placed.info = info
