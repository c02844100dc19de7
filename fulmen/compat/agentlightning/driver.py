"""Running a 0.x ``Algorithm``'s own ``run()`` on fulmen: what ``agl.Trainer`` does with one.

0.x's trainer wired an algorithm to a store and runners and called its ``run(train_dataset,
val_dataset)``. ``drive`` does the same with fulmen's parts: it starts the run's store, engine,
gateway and a runner executing the agent (``fulmen.trainer.stack.TrainingStack``), publishes
the initial resources, hands the algorithm a ``TrainerStore`` and awaits ``run``. The rollouts
the algorithm enqueues are run by fulmen's runner, their model calls recorded by the gateway.

``TrainerStore`` is the ``LightningStore`` facade over the run's store, with one rule for
published LLMs: every rollout's calls go through the gateway to the model this run serves, so
an ``LLM`` at another endpoint is refused (its calls would silently reach the served model),
and a snapshot with no ``LLM`` gets the served one (as ``llm``), so agents taking ``llm`` reach
it. The served LLM forces no sampling unless the fulmen config sets ``rollouts.train_sampling``
/ ``val_sampling``: the values an agent sends are the ones used, as when a 0.x agent called its
endpoint directly.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.resources import LLM, ResourcesUpdate
from fulmen.compat.agentlightning.store_facade import LightningStore

if TYPE_CHECKING:
    from fulmen.compat.agentlightning.algorithm_base import Algorithm
    from fulmen.store.base import Store
    from fulmen.trainer.config import TrainConfig

__all__ = ["TrainerStore", "drive"]

logger = logging.getLogger(__name__)


def _base(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/v1``, for comparing endpoints."""
    url = url.rstrip("/").lower()
    return url.removesuffix("/v1")


class TrainerStore(LightningStore):
    """The facade a driven algorithm gets: the run's store, and the model the run serves.

    Args:
        store: the run's store.
        served: the served model as a 0.x ``LLM`` (the engine's URL and model name).
        url: the store's URL.
        sampling: what the gateway applies to the calls of each mode (``LLMResource.sampling``;
            empty: nothing, the agent's own values are used).
    """

    def __init__(
        self,
        store: Store,
        *,
        served: LLM,
        url: str | None = None,
        sampling: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(store, url=url)
        self.served = served
        self.sampling = dict(sampling or {})

    async def add_resources(self, resources: dict[str, Any]) -> ResourcesUpdate:
        """Publish a snapshot (see the module docstring for its LLMs)."""
        from fulmen.types import LLMResource

        served: str = self.served.__dict__["endpoint"]
        llms = {name: r for name, r in resources.items() if isinstance(r, LLM)}
        if not llms:
            resources = {"llm": self.served, **resources}
            llms = {"llm": self.served}
        for name, llm in llms.items():
            endpoint: str = llm.__dict__["endpoint"]
            if _base(endpoint) != _base(served):
                raise NotSupported(
                    f"add_resources({{{name!r}: LLM(endpoint={endpoint!r})}})",
                    why=f"fulmen's gateway sends every rollout's model calls to the model this "
                    f"run serves ({served}), so calls meant for {endpoint} would silently go "
                    "there",
                    instead="publish the served model (it is in store.get_latest_resources()), "
                    "or serve that endpoint: engine: {kind: endpoint, url: ...} and model: in "
                    "the fulmen config",
                )
            if self.sampling:
                resources = {
                    **resources,
                    name: LLMResource(
                        base_url=endpoint, model=llm.model, api_key=llm.api_key,
                        sampling=self.sampling,
                    ),
                }  # fmt: skip
        return await super().add_resources(resources)


def _sampling(config: TrainConfig) -> dict[str, dict[str, Any]]:
    """Return the sampling the config sets explicitly, by mode (what the gateway applies)."""
    settings = config.rollouts
    chosen = settings.model_fields_set
    out: dict[str, dict[str, Any]] = {}
    if "train_sampling" in chosen:
        out["train"] = dict(settings.train_sampling)
    if "val_sampling" in chosen:
        out["val"] = out["test"] = dict(settings.val_sampling)
    return out


async def drive(
    algorithm: Algorithm,
    *,
    trainer: Any,
    config: TrainConfig,
    agent: Any,
    train: list[Any] | None,
    val: list[Any] | None,
    initial_resources: dict[str, Any],
    adapter: Any,
) -> None:
    """Run ``algorithm.run(train, val)`` against a started fulmen stack running ``agent``."""
    from fulmen.trainer.preflight import check_before_start
    from fulmen.trainer.stack import TrainingStack

    if not algorithm.is_async():
        raise NotSupported(
            f"{type(algorithm).__name__} with a synchronous run()",
            why="fulmen's store runs on the trainer's event loop, which a blocking run() "
            "would hold",
            instead="async def run(self, train_dataset=None, val_dataset=None) awaiting the "
            "store's methods",
        )
    check_before_start(agent, config.python_path)
    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    stack = TrainingStack(
        store_url=config.run_store_url(),
        agent=agent,
        model=config.model,
        engine=config.engine,
        rollouts=config.rollouts,
        log_dir=run_dir,
        python_path=config.python_path,
    )
    async with stack:
        served = LLM(endpoint=stack.engine_url, model=config.model)
        store = TrainerStore(
            stack.store, served=served, url=stack.store_url, sampling=_sampling(config)
        )
        first = await store.add_resources(dict(initial_resources))
        logger.info(
            "agl: running %s.run() against the store (%s), resources %s: %s",
            type(algorithm).__name__,
            stack.store_url,
            first.resources_id,
            sorted(first.resources),
        )
        algorithm.set_trainer(trainer)
        algorithm.set_store(store)
        algorithm.set_adapter(adapter)
        if initial_resources:
            algorithm.set_initial_resources(dict(initial_resources))
        started = algorithm.run(train_dataset=train, val_dataset=val)
        if started is None:  # is_async() said otherwise; a run() that returned at once
            return
        running = asyncio.ensure_future(started)
        try:
            while not running.done():
                await asyncio.wait({running}, timeout=2.0)
                if not running.done():
                    stack.check_runner()  # a runner that died ends the run with its error
        finally:
            if not running.done():
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        running.result()
